// Fused multi-tensor optimizer steps (AdamW, SGD) and gradient clipping on CUDA: one launch updates
// many tensors (core/cuda/kernels/multi_tensor.cuh), and nothing here reads device memory on the host, so a
// step skipped by GradScaler's found_inf needs no sync. The formulas are optim/adamw.cpp's and
// optim/sgd.cpp's, operation for operation; the fronts are in optim/.
#pragma once

#include <cstdint>
#include <vector>

#include <kiln/core/tensor.h>

namespace kiln::cuda {

// One AdamW launch list: every tensor contiguous, on one CUDA device; params, grads and the state
// buffers share one dtype (f32 or f64) and params[i]'s shape. steps[i] is a 0-dim i64 on the same
// device: the updates params[i] received (Note [Device step counts] in optim/optimizer.h).
struct AdamWTensors {
  std::vector<Tensor> params, grads, exp_avgs, exp_avg_sqs;
  std::vector<Tensor> max_exp_avg_sqs;  // amsgrad only (else empty)
  std::vector<Tensor> steps;
};

struct AdamWHyper {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
  bool amsgrad = false;
};

// torch.optim.AdamW's update of every tensor. `found_inf`: undefined, or a one-element f32 tensor
// on the same device; when it is non-zero nothing changes (step counts included). Otherwise each
// steps[i] is incremented and the bias corrections 1 - beta^t use the new count, in double.
// `lr_device`: undefined, or a 0-dim f64 on the same device whose value the kernel uses instead
// of h.lr, read when it runs (Note [Learning rate on the device], optim/grouped_optimizer.h).
void adamw_step(const AdamWTensors& t, const AdamWHyper& h, const Tensor& found_inf, const Tensor& lr_device = {});

// One SGD launch list, laid out as AdamWTensors. momentum_buffers: one per param when momentum is
// non-zero (else empty). fresh[i]: the buffer was created for this step and holds nothing yet.
struct SGDTensors {
  std::vector<Tensor> params, grads, momentum_buffers, steps;
  std::vector<uint8_t> fresh;  // empty when momentum is zero
};

struct SGDHyper {
  double lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

// torch.optim.SGD's update of every tensor; `found_inf` and steps as in adamw_step. A momentum
// buffer starts as d_p itself on its first real update: when fresh[i] or when steps[i] reaches 1.
void sgd_step(const SGDTensors& t, const SGDHyper& h, const Tensor& found_inf, const Tensor& lr_device = {});

// The total norm of order `norm_type` (kInfNorm: max |g|) over every gradient as one vector,
// accumulated in double, and the clip coefficient max_norm / (total + 1e-6): 0-dim f64 tensors on
// the gradients' device. Gradients: contiguous, one CUDA device, any floating dtypes, at least one.
struct GradNorm {
  Tensor total;
  Tensor clip_coef;
};
GradNorm grad_norm(const std::vector<Tensor>& grads, double norm_type, double max_norm);

// Every gradient *= clip_coef (rounded to its dtype) unless clip_coef >= 1, read on the device.
void clip_grads(const std::vector<Tensor>& grads, const Tensor& clip_coef);

}  // namespace kiln::cuda
