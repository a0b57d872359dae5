// The 16-bit compression hooks: a Work that wraps the all-reduce of the compressed copy and
// decompresses (cast back, divide) once, on the first wait() after the collective finished.
#include <kiln/parallel/comm_hooks.h>

#include <kiln/autograd/grad_mode.h>
#include <kiln/core/ops/elementwise.h>

namespace kiln::dist {

namespace {

class DecompressWork : public Work {
 public:
  DecompressWork(std::shared_ptr<Work> inner, Tensor compressed, Tensor bucket)
      : inner_(std::move(inner)), compressed_(std::move(compressed)), bucket_(std::move(bucket)) {}

  void wait() override {
    inner_->wait();
    if (done_) return;
    NoGradGuard no_grad;
    bucket_.copy_(compressed_);  // already the average: divided before the sum
    done_ = true;
    compressed_ = Tensor();
  }
  // Complete only once decompressed: until then the bucket does not hold the average.
  bool is_completed() override { return done_; }

 private:
  std::shared_ptr<Work> inner_;
  Tensor compressed_;
  Tensor bucket_;
  bool done_ = false;
};

std::shared_ptr<Work> compress_hook(ProcessGroup& group, Tensor& bucket, DType wire) {
  KILN_CHECK(is_floating(bucket.dtype()), "compress hook: the bucket has dtype ", bucket.dtype(),
             "; only floating gradients can be compressed");
  Tensor compressed = bucket.to(wire).contiguous();
  if (compressed.is_same(bucket)) compressed = bucket.clone();  // already 16-bit: still reduce a copy
  // Note [Divide before summing] (reducer.cpp): the partial sums stay in the 16-bit range.
  if (group.size() > 1) ops::mul_(compressed, 1.0 / group.size());
  auto inner = group.allreduce(compressed, AllreduceOptions().op(ReduceOp::sum));
  return std::make_shared<DecompressWork>(std::move(inner), std::move(compressed), bucket);
}

}  // namespace

std::shared_ptr<Work> bf16_compress_hook(ProcessGroup& group, Tensor& bucket) {
  return compress_hook(group, bucket, DType::bf16);
}

std::shared_ptr<Work> fp16_compress_hook(ProcessGroup& group, Tensor& bucket) {
  return compress_hook(group, bucket, DType::f16);
}

}  // namespace kiln::dist
