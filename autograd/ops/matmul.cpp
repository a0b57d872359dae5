// Differentiable matrix products. One backward serves matmul, bmm and mm: 1-D operands are
// promoted to matrices as in the forward, dA = g @ B^T and dB = A^T @ g are computed with the
// raw kiln::ops::matmul, and batch dims that broadcasting added or expanded are summed back.
#include <kiln/autograd/ops/matmul.h>

#include <kiln/autograd/autocast.h>
#include <kiln/autograd/function.h>
#include <kiln/core/ops/matmul.h>
#include <kiln/core/ops/reduce.h>

namespace kiln {

using autograd::Grads;
using autograd::Needs;
using autograd::OpNode;
using autograd::saved;

namespace {

// The last two dims swapped (a view).
Tensor mT(const Tensor& t) { return t.transpose(t.dim() - 2, t.dim() - 1); }

// One backward for matmul, bmm and mm.
Tensor record_product(Tensor out, const char* name, const Tensor& a, const Tensor& b) {
  return autograd::record(std::move(out), name, {&a, &b}, [&](const Needs& needs) {
    // a is kept only when b needs a gradient, and b only when a does.
    return [a = needs[1] ? saved(a) : Tensor(), b = needs[0] ? saved(b) : Tensor()](const Tensor& g,
                                                                                    const OpNode& node) -> Grads {
      // Promote 1-D operands (a row on the left, a column on the right) and give g back the dims
      // the forward removed, so that everything below is a (batched) matrix product.
      const Shape& a_shape = node.input_info[0].shape;
      const Shape& b_shape = node.input_info[1].shape;
      Tensor g2 = g;
      if (b_shape.ndim() == 1) g2 = g2.unsqueeze(g2.dim());
      if (a_shape.ndim() == 1) g2 = g2.unsqueeze(g2.dim() - 1);
      Tensor ga, gb;
      if (node.needs_input_grad(0)) {
        Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
        ga = ops::matmul(g2, mT(b2));
        ga = autograd::sum_to(ga, a_shape.ndim() == 1 ? Shape{1, a_shape[0]} : a_shape).reshape(a_shape);
      }
      if (node.needs_input_grad(1)) {
        Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
        gb = ops::matmul(mT(a2), g2);
        gb = autograd::sum_to(gb, b_shape.ndim() == 1 ? Shape{b_shape[0], 1} : b_shape).reshape(b_shape);
      }
      return {ga, gb};
    };
  });
}

}  // namespace

// Under autocast every operand is cast to the low dtype first (Note [Autocast op lists]).
Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = autograd::autocast_to_low(a_in), b = autograd::autocast_to_low(b_in);
  return record_product(ops::matmul(a, b), "MatmulBackward", a, b);
}
Tensor bmm(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = autograd::autocast_to_low(a_in), b = autograd::autocast_to_low(b_in);
  return record_product(ops::bmm(a, b), "BmmBackward", a, b);
}
Tensor mm(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = autograd::autocast_to_low(a_in), b = autograd::autocast_to_low(b_in);
  return record_product(ops::mm(a, b), "MmBackward", a, b);
}

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  const Tensor x = autograd::autocast_to_low(x_in), weight = autograd::autocast_to_low(weight_in),
               bias = autograd::autocast_to_low(bias_in);
  Tensor out = ops::linear(x, weight, bias);
  // x (..., in), weight (out, in), bias (out) or undefined.
  return autograd::record(out, "LinearBackward", {&x, &weight, &bias}, [&](const Needs& needs) {
    // x is kept only when weight needs a gradient, weight only when x does.
    return [x = needs[1] ? saved(x) : Tensor(), weight = needs[0] ? saved(weight) : Tensor()](
               const Tensor& g, const OpNode& node) -> Grads {  // g (..., out)
      Tensor gx, gw;
      if (node.needs_input_grad(0)) gx = ops::matmul(g, weight);  // (..., in)
      if (node.needs_input_grad(1)) {
        // Every leading dim is a batch dim: fold them into rows and contract over them.
        const Shape& w_shape = node.input_info[1].shape;
        Tensor g2 = g.reshape({-1, w_shape[0]});  // (N, out)
        Tensor x2 = x.reshape({-1, w_shape[1]});  // (N, in)
        gw = ops::mm(g2.t(), x2);                 // (out, in)
      }
      return {gx, gw, g};  // the bias gradient is g summed over the leading dims by input_grad
    };
  });
}

}  // namespace kiln
