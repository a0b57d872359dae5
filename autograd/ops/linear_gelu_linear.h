// linear(gelu_tanh(linear(x, w1, b1)), w2, b2), a GPT MLP, as one node that keeps x and the
// pre-activation only and, on CUDA, runs the first product's bias and GELU in cuBLASLt's epilogue
// (ops::linear_gelu, which also hands back the pre-activation): one pass over the (..., hidden)
// activations fewer each way than linear, then gelu_linear (issue #41).
#pragma once

#include <kiln/core/tensor.h>

namespace kiln {

/// x (..., in), w1 (hidden, in), b1 (hidden) or undefined, w2 (out, hidden), b2 (out) or undefined
/// -> (..., out). On the CPU bitwise equal to linear(gelu(linear(x, w1, b1), tanh), w2, b2) in value
/// and gradients, under autocast too (both products in the low dtype, as the two linears give). On
/// CUDA the epilogue computes GELU from the f32 accumulator before the low-dtype rounding, so values
/// differ from the composition by rounding; the backward recomputes gelu(pre) from the stored
/// pre-activation (Note [Fused bias-GELU epilogue] in autograd/ops/linear_gelu_linear.cpp, in the source tree, in the source
/// tree).
Tensor linear_gelu_linear(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                          const Tensor& b2 = Tensor());

///@{
/// Whether GPT's MLP uses linear_gelu_linear: off unless set_fused_gelu_epilogue(true) or
/// KILN_FUSED_GELU_EPILOGUE=1 (read at the first call). On the CPU it saves nothing (no epilogue)
/// and holds the output's gradient through the whole node (the composition frees it after c_proj's
/// part: one (..., out) tensor more at the backward's peak); on CUDA it has not run in training yet.
bool fused_gelu_epilogue();
void set_fused_gelu_epilogue(bool on);
///@}

}  // namespace kiln
