// The autocast casting policy (Note [Autocast op lists] in autograd/autocast.h): the casts ops
// apply to their inputs, and the per-thread cache that casts each weight once per forward.
#include <kiln/autograd/autocast.h>

#include <map>
#include <tuple>
#include <utility>

#include <kiln/autograd/grad_mode.h>

namespace kiln::autograd {

namespace {

// Key: (source impl, low dtype, grad mode). The entry keeps the source alive, so its address
// cannot be reused by another tensor while the entry exists.
using CacheKey = std::tuple<const TensorImpl*, DType, bool>;
struct CastCache {
  uint64_t epoch = 0;
  std::map<CacheKey, std::pair<Tensor, Tensor>> entries;  // key -> (source, cast)
};

CastCache& cache() {
  thread_local CastCache c;
  return c;
}

// Installed during static initialisation (before any thread can read the hook): this object is
// always linked, since every differentiable matmul-like op calls autocast_to_low.
const bool g_clear_hook_installed = [] {
  detail::autocast_cache_clear_hook = &clear_autocast_cache;
  return true;
}();

bool eligible(const Tensor& t) { return t.defined() && is_floating(t.dtype()) && t.dtype() != DType::f64; }

}  // namespace

Tensor autocast_to_low(const Tensor& t) {
  if (!autocast_enabled() || !eligible(t)) return t;
  const DType low = autocast_dtype();
  if (t.dtype() == low) return t;
  // Only weights are cached, and only inside a guard (whose end drops the cache).
  if (autocast_depth() == 0 || !t.is_leaf() || !t.requires_grad()) return t.to(low);
  CastCache& c = cache();
  if (c.epoch != autocast_epoch()) {
    c.entries.clear();
    c.epoch = autocast_epoch();
  }
  const CacheKey key{t.impl(), low, grad_mode_enabled()};
  auto it = c.entries.find(key);
  if (it != c.entries.end()) return it->second.second;
  Tensor cast = t.to(low);
  c.entries.emplace(key, std::make_pair(t, cast));
  return cast;
}

Tensor autocast_to_f32(const Tensor& t) {
  if (!autocast_enabled() || !eligible(t) || t.dtype() == DType::f32) return t;
  return t.to(DType::f32);
}

size_t autocast_cache_size() {
  const CastCache& c = cache();
  return c.epoch == autocast_epoch() && autocast_depth() > 0 ? c.entries.size() : 0;
}

void clear_autocast_cache() { cache().entries.clear(); }

}  // namespace kiln::autograd
