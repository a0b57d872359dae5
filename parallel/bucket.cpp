// Bucket assignment: the greedy size-capped grouping of Note [Bucket views] (torch's
// compute_bucket_assignment_by_size, one open bucket per dtype and device), and the host side of
// a bucket tail.
#include <kiln/parallel/bucket.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include <kiln/core/factory.h>

namespace kiln::dist {

Tensor host_values(const std::vector<double>& values, Device device) {
  Tensor h = from_vector(values, {int64_t(values.size())});
  return device.is_cuda() ? h.pin_memory() : h;
}

std::vector<std::vector<size_t>> compute_bucket_assignment(const std::vector<Tensor>& tensors,
                                                           const std::vector<size_t>& order,
                                                           size_t first_bucket_cap_bytes, size_t bucket_cap_bytes) {
  struct Open {
    std::vector<size_t> members;
    size_t bytes = 0;
    bool first = true;  // still filling the first bucket of its (dtype, device)
  };
  // Keyed by (dtype, device type, device index).
  std::map<std::tuple<int, int, int>, Open> open;
  std::vector<std::pair<size_t, std::vector<size_t>>> done;  // (position of first member, members)
  std::vector<size_t> position(tensors.size(), 0);
  std::vector<bool> seen(tensors.size(), false);
  for (size_t pos = 0; pos < order.size(); ++pos) {
    size_t i = order[pos];
    KILN_CHECK(i < tensors.size(), "compute_bucket_assignment: index ", i, " in order, but only ", tensors.size(),
               " tensors");
    KILN_CHECK(!seen[i], "compute_bucket_assignment: tensor ", i, " appears twice in order");
    seen[i] = true;
    position[i] = pos;
    const Tensor& t = tensors[i];
    check_defined(t, "compute_bucket_assignment", "tensor");
    auto key = std::make_tuple(static_cast<int>(t.dtype()), static_cast<int>(t.device().type),
                               static_cast<int>(t.device().index));
    Open& b = open[key];
    b.members.push_back(i);
    b.bytes += t.nbytes();
    size_t cap = b.first ? first_bucket_cap_bytes : bucket_cap_bytes;
    if (b.bytes >= cap) {
      done.emplace_back(position[b.members.front()], std::move(b.members));
      b.members.clear();
      b.bytes = 0;
      b.first = false;
    }
  }
  for (auto& [key, b] : open)
    if (!b.members.empty()) done.emplace_back(position[b.members.front()], std::move(b.members));
  std::sort(done.begin(), done.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::vector<size_t>> out;
  out.reserve(done.size());
  for (auto& d : done) out.push_back(std::move(d.second));
  return out;
}

}  // namespace kiln::dist
