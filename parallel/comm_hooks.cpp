// The built-in comm hooks (all-reduce, 16-bit compression) and then_work, the continuation Work
// hooks use to finish after their collective (decompress, PowerSGD's later stages).
#include <kiln/parallel/comm_hooks.h>

#include <kiln/autograd/grad_mode.h>
#include <kiln/core/ops/elementwise.h>

namespace kiln::dist {

namespace {

class ThenWork : public Work {
 public:
  ThenWork(std::shared_ptr<Work> inner, std::function<void()> then) : inner_(std::move(inner)), then_(std::move(then)) {}

  void wait() override {
    inner_->wait();
    if (done_) return;
    NoGradGuard no_grad;
    auto then = std::move(then_);
    then_ = nullptr;
    done_ = true;  // before running: a throwing continuation is not retried
    then();
  }
  bool is_completed() override { return done_; }

 private:
  std::shared_ptr<Work> inner_;
  std::function<void()> then_;
  bool done_ = false;
};

std::shared_ptr<Work> compress_hook(ProcessGroup& group, GradBucket& bucket, DType wire) {
  Tensor buffer = bucket.buffer;
  KILN_CHECK(is_floating(buffer.dtype()), "compress hook: the bucket has dtype ", buffer.dtype(),
             "; only floating gradients can be compressed");
  NoGradGuard no_grad;
  Tensor compressed = buffer.to(wire).contiguous();
  if (compressed.is_same(buffer)) compressed = buffer.clone();  // already 16-bit: still reduce a copy
  // Note [Divide before summing] (reducer.cpp): the partial sums stay in the 16-bit range.
  if (group.size() > 1) ops::mul_(compressed, 1.0 / group.size());
  auto inner = group.allreduce(compressed, AllreduceOptions().op(ReduceOp::sum));
  return then_work(std::move(inner), [buffer, compressed]() mutable {
    buffer.copy_(compressed);  // already the average: divided before the sum
  });
}

}  // namespace

std::shared_ptr<Work> then_work(std::shared_ptr<Work> inner, std::function<void()> then) {
  KILN_CHECK(inner != nullptr && then != nullptr, "then_work: needs a Work and a continuation");
  return std::make_shared<ThenWork>(std::move(inner), std::move(then));
}

std::shared_ptr<Work> allreduce_hook(ProcessGroup& group, GradBucket& bucket) {
  NoGradGuard no_grad;
  if (group.size() > 1) ops::mul_(bucket.buffer, 1.0 / group.size());
  return group.allreduce(bucket.buffer, AllreduceOptions().op(ReduceOp::sum));
}

std::shared_ptr<Work> bf16_compress_hook(ProcessGroup& group, GradBucket& bucket) {
  return compress_hook(group, bucket, DType::bf16);
}

std::shared_ptr<Work> fp16_compress_hook(ProcessGroup& group, GradBucket& bucket) {
  return compress_hook(group, bucket, DType::f16);
}

}  // namespace kiln::dist
