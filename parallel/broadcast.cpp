// broadcast_from_rank0 (parallel/broadcast.h).
#include <kiln/parallel/broadcast.h>

#include <memory>
#include <utility>

#include <kiln/autograd/grad_mode.h>

namespace kiln::dist {

void broadcast_from_rank0(ProcessGroup& group, const std::vector<Tensor>& tensors) {
  if (group.size() == 1) return;
  NoGradGuard no_grad;
  std::vector<std::pair<Tensor, Tensor>> pending;  // (target, working copy)
  std::vector<std::shared_ptr<Work>> works;
  for (const Tensor& t : tensors) {
    Tensor d = t.detach();
    Tensor work = d.is_contiguous() ? d : d.contiguous();
    works.push_back(group.broadcast(work, 0));
    pending.emplace_back(d, work);
  }
  for (auto& w : works) w->wait();
  for (auto& [d, work] : pending)
    if (!work.is_same(d)) d.copy_(work);
}

}  // namespace kiln::dist
