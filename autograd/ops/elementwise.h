// Differentiable elementwise ops (kiln::add, kiln::exp, a + b, ...). Broadcasting and dtype
// promotion follow kiln::ops; gradients are summed back to each input's shape and dtype.
#pragma once

#include <kiln/core/tensor.h>

namespace kiln {

///@{
/// Element-wise a + b, a - b, a * b, a / b, a to the power b, and the larger and smaller of a and b,
/// with broadcasting and dtype promotion; gradients are summed back to each input's shape.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);  ///< gradient to the larger (split evenly on ties)
Tensor minimum(const Tensor& a, const Tensor& b);
///@}

///@{
/// The same with a scalar b (or exponent).
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor rsub(const Tensor& a, double b);  ///< b - a
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor pow(const Tensor& a, double exponent);
///@}

///@{
/// Element-wise functions of x, as their torch namesakes.
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor square(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sin(const Tensor& x);  ///< radians; integer inputs give f32, as every float function here
Tensor cos(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
///@}
/// GELU's form: the exact x * Phi(x) (none) or the tanh approximation (torch's approximate="tanh").
enum class GeluApproximate { none, tanh };
/// x * Phi(x), Phi the standard normal CDF, or its tanh approximation (torch's F.gelu).
Tensor gelu(const Tensor& x, GeluApproximate approximate = GeluApproximate::none);

///@{
/// cond ? a : b (no gradient to cond), and x with mask positions set to value.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
///@}

///@{
/// Operators for add, sub, mul, div and neg (differentiable, as the functions).
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
///@}

}  // namespace kiln
