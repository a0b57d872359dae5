// linear_gelu_linear: ops::linear_gelu (bias + GELU in cuBLASLt's epilogue on CUDA) and ops::linear,
// recorded as one node that saves x and the pre-activation, not the GELU's output.
#include <kiln/autograd/ops/linear_gelu_linear.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include <kiln/autograd/autocast.h>
#include <kiln/autograd/function.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/core/ops/matmul.h>

namespace kiln {

// Note [Fused bias-GELU epilogue]
// GPT's MLP is c_proj(gelu_tanh(c_fc(x))). As linear then gelu_linear it writes c_fc's output pre,
// reads it back for the GELU and writes act, which c_proj reads. Here ops::linear_gelu writes act and
// pre in the first product's epilogue (cuBLASLt GELU_AUX_BIAS, GPT-2's tanh form: test_cuda_matmul
// checks it against the float64 reference), saving the GELU pass. The node keeps x and pre, as
// gelu_linear keeps pre: act is recomputed from pre for c_proj's weight gradient. Backward, with g
// the output's gradient: dW2 = g^T act, db2 = sum g, dpre = gelu'(pre) * (g W2), dW1 = dpre^T x,
// db1 = sum dpre, dx = dpre W1 -- the same kernels, in the same dtypes, as the two linears' and
// gelu_linear's backward, so on the CPU (no epilogue: linear then gelu_tanh) it is bitwise the
// composition (autograd_linear_gelu_linear).

Tensor linear_gelu_linear(const Tensor& x_in, const Tensor& w1_in, const Tensor& b1_in, const Tensor& w2_in,
                          const Tensor& b2_in) {
  check_defined(x_in, "linear_gelu_linear", "x");
  check_defined(w1_in, "linear_gelu_linear", "w1");
  check_defined(w2_in, "linear_gelu_linear", "w2");
  // Both linears cast all of their inputs to the low dtype under autocast; GELU runs in pre's dtype.
  const Tensor x = autograd::autocast_to_low(x_in), w1 = autograd::autocast_to_low(w1_in),
               b1 = autograd::autocast_to_low(b1_in), w2 = autograd::autocast_to_low(w2_in),
               b2 = autograd::autocast_to_low(b2_in);
  ops::LinearGelu first = ops::linear_gelu(x, w1, b1);  // act (..., hidden), pre (..., hidden)
  KILN_CHECK_VALUE(w2.dim() == 2 && w2.shape()[1] == first.out.shape()[first.out.dim() - 1], "linear_gelu_linear: w2 ",
                   w2.shape(), " does not take the hidden width ", first.out.shape()[first.out.dim() - 1], " of w1 ",
                   w1.shape());
  Tensor out = ops::linear(first.out, w2, b2);
  const Tensor pre = first.pre_gelu;
  return autograd::record(out, "LinearGeluLinearBackward", {&x, &w1, &b1, &w2, &b2}, [&](const autograd::Needs& needs) {
    const bool through_gelu = needs[0] || needs[1] || needs[2];
    return [x = needs[1] ? autograd::saved(x) : Tensor(), w1 = needs[0] ? autograd::saved(w1) : Tensor(),
            w2 = through_gelu ? autograd::saved(w2) : Tensor(),
            pre = through_gelu || needs[3] ? autograd::saved(pre) : Tensor()](
               const Tensor& g, const autograd::OpNode& node) -> autograd::Grads {  // g (..., out)
      Tensor gx, gw1, gb1, gw2;
      const Shape& w1_shape = node.input_info[1].shape;  // (hidden, in)
      const Shape& w2_shape = node.input_info[3].shape;  // (out, hidden)
      if (node.needs_input_grad(3)) {
        Tensor act = ops::gelu_tanh(pre).reshape({-1, w2_shape[1]});  // (N, hidden), recomputed
        gw2 = ops::mm(g.reshape({-1, w2_shape[0]}).t(), act);          // (out, hidden)
      }
      if (node.needs_input_grad(0) || node.needs_input_grad(1) || node.needs_input_grad(2)) {
        Tensor gact = ops::matmul(g, w2);  // (..., hidden) in the product's dtype, pre's dtype
        if (gact.dtype() != pre.dtype()) gact = gact.to(pre.dtype());
        Tensor gpre = ops::gelu_tanh_backward(gact, pre);
        if (node.needs_input_grad(0)) gx = ops::matmul(gpre, w1);  // (..., in)
        if (node.needs_input_grad(1))
          gw1 = ops::mm(gpre.reshape({-1, w1_shape[0]}).t(), x.reshape({-1, w1_shape[1]}));  // (hidden, in)
        gb1 = gpre;  // summed over the leading dims by input_grad, as linear's bias gradient
      }
      return {gx, gw1, gb1, gw2, g};
    };
  });
}

namespace {
std::atomic<int> g_fused{-1};  // -1: KILN_FUSED_GELU_EPILOGUE not read yet
}  // namespace

bool fused_gelu_epilogue() {
  int v = g_fused.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv("KILN_FUSED_GELU_EPILOGUE");
    const std::string s = env ? env : "";
    KILN_CHECK(s.empty() || s == "0" || s == "1", "KILN_FUSED_GELU_EPILOGUE must be 0 or 1, got '", s, "'");
    v = s == "1" ? 1 : 0;
    int expected = -1;
    g_fused.compare_exchange_strong(expected, v);
    v = g_fused.load(std::memory_order_relaxed);
  }
  return v == 1;
}

void set_fused_gelu_epilogue(bool on) { g_fused.store(on ? 1 : 0, std::memory_order_relaxed); }

}  // namespace kiln
