// Distributed test-set evaluation of train_cifar (Note [Distributed evaluation] in cifar_eval.h).
#include "cifar_eval.h"

#include <algorithm>

#include <kiln/autograd/grad_mode.h>
#include <kiln/core/autocast.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/core/ops/reduce.h>
#include <kiln/data/augment.h>

namespace kiln::apps {

EvalCounts evaluate(models::CifarCnn& model, const data::Cifar10Dataset& test, dist::ProcessGroup* group,
                    int64_t batch_size, DType amp, Device device) {
  KILN_CHECK(batch_size > 0, "evaluate: batch size must be positive, got ", batch_size);
  const int64_t rank = group ? group->rank() : 0, world = group ? group->size() : 1;
  const int64_t n = test.size(), begin = rank * n / world, end = (rank + 1) * n / world;
  EvalCounts counts;
  Tensor correct = zeros({}, TensorOptions(DType::f64).device(device));  // on the device: one read at the end
  {
    NoGradGuard no_grad;
    AutocastGuard autocast(amp == DType::f32 ? DType::bf16 : amp, amp != DType::f32);
    model.eval();
    for (int64_t b = begin; b < end; b += batch_size) {
      data::Cifar10Dataset part = data::slice(test, b, std::min(end, b + batch_size));
      Tensor logits = model.forward(data::normalize(part.images).to(device));
      Tensor hits = ops::eq(ops::argmax(logits, 1), part.labels.to(device));
      correct = ops::add(correct, ops::sum(hits.to(DType::f64)));
      counts.total += part.size();
    }
    model.train();
  }
  counts.correct = static_cast<int64_t>(correct.item());
  if (group && world > 1) {
    Tensor both = from_vector<double>({double(counts.correct), double(counts.total)}, Shape{2}).to(group->device());
    group->allreduce(both)->wait();
    both = both.to(Device::cpu());
    counts.correct = static_cast<int64_t>(both.data<double>()[0]);
    counts.total = static_cast<int64_t>(both.data<double>()[1]);
  }
  return counts;
}

}  // namespace kiln::apps
