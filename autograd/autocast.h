// Autocast casting policy: which differentiable ops run in the low dtype and which in f32 while
// an AutocastGuard (core/autocast.h) is active. Ops call these helpers on their inputs first; with
// autocast off each is one thread-local check. Casts go through the differentiable Tensor::to, so
// the gradient of an f32 parameter is cast back and arrives in f32.
#pragma once

#include <cstddef>

#include <kiln/core/autocast.h>
#include <kiln/core/tensor.h>

namespace kiln::autograd {

// Note [Autocast op lists]
// Under AutocastGuard(low), for floating inputs other than f64 (f64 is never touched, as torch):
//   low dtype (inputs cast to `low`, output in `low`):
//     matmul, bmm, mm, linear (x, weight, bias), conv2d (x, weight, bias),
//     scaled_dot_product_attention (q, k, v)
//   f32 (inputs cast to f32, output f32, whatever the inputs' dtype):
//     softmax, log_softmax, layer_norm (x, weight, bias), batch_norm (x, weight, bias),
//     cross_entropy (logits), mse_loss, sum, mean, var
//   every other op runs in its inputs' dtype; binary ops promote (bf16 + f32 -> f32), so a
//   low-precision activation added to an f32 residual gives f32, as in torch.
// These are the lists of torch's CUDA autocast (its "lower precision" and "fp32" lists). Kiln uses
// them on every device: torch 1.13's CPU autocast keeps softmax, layer_norm and sum in bf16, Kiln
// keeps them in f32 on the CPU too, so a model behaves the same on both backends.
//
// Cast cache: a leaf that requires grad (a weight) is cast once per outermost guard and the copy
// is reused by every later use in that guard (keyed by the tensor, the low dtype and grad mode),
// so a weight shared by several layers or micro-batches costs one cast. The cache holds the
// source and the copy strongly and is dropped when the outermost guard closes. Changing a weight
// in place inside a guard (an optimizer step) is not seen by its cached copy: step outside the
// guard, as with torch.autocast.

/// t cast to autocast_dtype() when autocast is on and t is floating and not f64; t itself otherwise.
Tensor autocast_to_low(const Tensor& t);
/// t cast to f32 when autocast is on and t is bf16 or f16; t itself otherwise.
Tensor autocast_to_f32(const Tensor& t);

/// Entries in this thread's cast cache (0 outside a guard): for tests and diagnostics.
size_t autocast_cache_size();
/// Drops this thread's cast cache (the outermost guard does this when it closes).
void clear_autocast_cache();

}  // namespace kiln::autograd
