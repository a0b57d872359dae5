// gelu_linear: the raw GELU and linear kernels, recorded as one node that saves h, not gelu(h).
#include <kiln/autograd/ops/gelu_linear.h>

#include <kiln/autograd/autocast.h>
#include <kiln/autograd/function.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/core/ops/matmul.h>

namespace kiln {

namespace {

Tensor gelu_raw(const Tensor& h, GeluApproximate approximate) {
  return approximate == GeluApproximate::tanh ? ops::gelu_tanh(h) : ops::gelu_erf(h);
}

// gelu(h) cast as linear would cast its input under the autocast state the forward ran in.
Tensor activation(const Tensor& h, GeluApproximate approximate, DType product_dtype) {
  Tensor a = gelu_raw(h, approximate);
  return a.dtype() == product_dtype ? a : a.to(product_dtype);
}

}  // namespace

Tensor gelu_linear(const Tensor& h_in, const Tensor& weight_in, const Tensor& bias_in, GeluApproximate approximate) {
  check_defined(h_in, "gelu_linear", "h");
  check_defined(weight_in, "gelu_linear", "weight");
  // GELU is not on an autocast list (it runs in h's dtype); linear casts all three to the low dtype.
  const Tensor h = h_in;
  const Tensor weight = autograd::autocast_to_low(weight_in), bias = autograd::autocast_to_low(bias_in);
  Tensor a;
  {
    NoGradGuard no_grad;
    a = autograd::autocast_to_low(gelu_raw(autograd::saved(h), approximate));
  }
  const DType product_dtype = a.dtype();
  Tensor out = ops::linear(a, weight, bias);
  return autograd::record(out, "GeluLinearBackward", {&h, &weight, &bias}, [&](const autograd::Needs& needs) {
    // h is kept when anything needs a gradient through it or the weight; the weight only for dh.
    return [h = needs[0] || needs[1] ? autograd::saved(h) : Tensor(), weight = needs[0] ? autograd::saved(weight) : Tensor(),
            approximate, product_dtype](const Tensor& g, const autograd::OpNode& node) -> autograd::Grads {
      Tensor gh, gw;
      if (node.needs_input_grad(0)) {
        Tensor ga = ops::matmul(g, weight);            // (..., in) in the product's dtype
        if (ga.dtype() != h.dtype()) ga = ga.to(h.dtype());  // the cast's backward in the unfused pair
        gh = approximate == GeluApproximate::tanh ? ops::gelu_tanh_backward(ga, h) : ops::gelu_erf_backward(ga, h);
      }
      if (node.needs_input_grad(1)) {
        const Shape& w_shape = node.input_info[1].shape;
        Tensor a2 = activation(h, approximate, product_dtype).reshape({-1, w_shape[1]});  // (N, in), recomputed
        gw = ops::mm(g.reshape({-1, w_shape[0]}).t(), a2);                                // (out, in)
      }
      return {gh, gw, g};  // the bias gradient is g summed over the leading dims by input_grad
    };
  });
}

}  // namespace kiln
