// The collective side of SyncBatchNorm: a differentiable all-reduce and the conversion of a
// model's BatchNorm2d layers.
#include <kiln/parallel/sync_batch_norm.h>

#include <kiln/autograd/function.h>

namespace kiln::dist {

Tensor all_reduce_sum(const Tensor& t, const std::shared_ptr<ProcessGroup>& group) {
  KILN_CHECK(group != nullptr, "all_reduce_sum: the process group is null");
  check_defined(t, "all_reduce_sum");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = t.contiguous().clone();
    group->allreduce(out, AllreduceOptions().op(ReduceOp::sum))->wait();
  }
  // The sum's gradient with respect to every rank's input is the sum of every rank's output
  // gradient: all-reduce it.
  return autograd::record(out, "AllReduceSumBackward", {&t}, [&](const autograd::Needs&) {
    return [group](const Tensor& g) -> Tensor {
      Tensor summed = g.contiguous().clone();
      group->allreduce(summed, AllreduceOptions().op(ReduceOp::sum))->wait();
      return summed;
    };
  });
}

GroupSum::GroupSum(std::shared_ptr<ProcessGroup> group) : group_(std::move(group)) {
  KILN_CHECK(group_ != nullptr, "SyncBatchNorm: the process group is null");
}

int convert_sync_batchnorm(nn::Module& model, const std::shared_ptr<ProcessGroup>& group) {
  auto sum = std::make_shared<GroupSum>(group);
  int converted = 0;
  for (auto& [name, m] : model.named_modules())
    if (auto bn = std::dynamic_pointer_cast<nn::BatchNorm2d>(m)) {
      bn->cross_process_stats = sum;
      ++converted;
    }
  return converted;
}

}  // namespace kiln::dist

namespace kiln::nn {

SyncBatchNorm::SyncBatchNorm(const BatchNormOptions& options, std::shared_ptr<dist::ProcessGroup> group)
    : BatchNorm2d(options) {
  cross_process_stats = std::make_shared<dist::GroupSum>(std::move(group));
}

}  // namespace kiln::nn
