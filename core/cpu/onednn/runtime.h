// What the oneDNN kernels in core/cpu/onednn share: the CPU engine, this thread's stream, matching
// oneDNN's threads to Kiln's, scratchpads in Kiln's allocator, buffers in a primitive's layout, and
// the cache of primitives by shape. Included only by core/cpu/onednn/*.cpp (it includes dnnl.hpp).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <kiln/core/tensor.h>

namespace kiln::cpu::onednn {

using dnnl::memory;
using Args = std::unordered_map<int, memory>;

dnnl::engine& engine();
dnnl::stream& stream();  // the calling thread's

// Note [oneDNN threads]
// This oneDNN is built on OpenMP (Debian's libdnnl uses libgomp, the runtime Kiln's parallel_for
// uses), so it runs omp_get_max_threads() threads of the calling thread. match_threads() sets that
// to num_threads() before each primitive runs: set_num_threads() changes it only on the thread
// that called it, and backward may run elsewhere. Inside a parallel_for region oneDNN runs on the
// calling thread alone (no nested parallelism). Primitives may be laid out for a thread count, so
// the count is part of every cache key.
int match_threads();  // returns the thread count in force

// Every primitive here is made with a user scratchpad (so one primitive can run on several threads
// at once, each with its own scratchpad).
dnnl::primitive_attr scratchpad_attr();
// Runs prim with args plus a scratchpad of `scratchpad` bytes' layout from Kiln's CPU allocator.
void execute(const dnnl::primitive& prim, const memory::desc& scratchpad, Args args);

// A dense row-major f32 descriptor of dims (oneDNN's plain abcd... layout).
memory::desc plain_desc(const memory::dims& dims);
// f32 memory of md over t's data (t must be f32, CPU, and hold md's bytes).
memory wrap(const memory::desc& md, const Tensor& t);
// A fresh f32 buffer (Kiln CPU tensor) big enough for md, and the memory over it.
memory fresh(const memory::desc& md, Tensor& holder);

// A reorder between two layouts, made once: run(from, to) converts, or does nothing when the
// layouts were equal (then from and to are the same buffer; see in_layout / out_layout).
struct Reorder {
  bool needed = false;
  dnnl::reorder prim;
  Reorder() = default;
  Reorder(const memory::desc& from, const memory::desc& to);
  void run(const memory& from, const memory& to) const;
};

// `user` (a Kiln tensor's memory) as the primitive wants it: itself, or reordered into a fresh
// buffer held by holder.
memory in_layout(const memory& user, const memory::desc& want, const Reorder& reorder, Tensor& holder);

// Primitives by shape (Note [oneDNN primitive cache]).
using Key = std::vector<int64_t>;

// Note [oneDNN primitive cache]
// Making a primitive (choosing an implementation, JIT-compiling it) costs far more than running it
// on CIFAR-sized layers, and a training loop asks for the same few shapes every step. Each kernel
// keeps its own cache: the key is the kind, every dim and option, and the thread count; the entry
// holds the primitive descriptor, the primitive and the reorders around it. The cache is bounded:
// past kCacheEntries it is emptied and refilled (shapes that change every call are rare and would
// not profit from caching anyway). Entries are shared_ptrs, so a lookup racing a clear is safe.
inline constexpr size_t kCacheEntries = 512;

template <class Entry>
class Cache {
 public:
  std::shared_ptr<const Entry> get(const Key& key, const std::function<std::shared_ptr<Entry>()>& make) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = entries_.find(key);
      if (it != entries_.end()) return it->second;
    }
    std::shared_ptr<Entry> made = make();  // outside the lock: JIT compiling takes a while
    std::lock_guard<std::mutex> lock(mu_);
    if (entries_.size() >= kCacheEntries) entries_.clear();
    return entries_.emplace(key, std::move(made)).first->second;
  }

 private:
  std::mutex mu_;
  std::map<Key, std::shared_ptr<const Entry>> entries_;
};

}  // namespace kiln::cpu::onednn
