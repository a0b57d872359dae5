// validation_loss (see val_loss.h).
#include "val_loss.h"

#include <kiln/core/ops/elementwise.h>

namespace kiln::apps {

double validation_loss(models::GPT& model, data::TokenLoader& loader, int64_t batches, DType amp, Device device,
                       const std::shared_ptr<dist::ProcessGroup>& group) {
  NoGradGuard no_grad;
  model.eval();
  loader.reset();
  Tensor sum = zeros({1}, TensorOptions(DType::f64).device(device));  // on the device: one read at the end
  for (int64_t i = 0; i < batches; ++i) {
    data::TokenBatch b = loader.next();
    AutocastGuard autocast(amp == DType::f32 ? DType::bf16 : amp, amp != DType::f32);
    Tensor loss = model.loss(b.x.to(device, /*non_blocking=*/true), b.y.to(device, /*non_blocking=*/true));
    ops::add_(sum, loss.detach().to(DType::f64).reshape({1}));
  }
  model.train();
  if (group && group->size() > 1) {
    if (sum.device() != group->device()) sum = sum.to(group->device());
    group->allreduce(sum)->wait();
  }
  return sum.item() / double(batches) / double(group ? group->size() : 1);
}

}  // namespace kiln::apps
