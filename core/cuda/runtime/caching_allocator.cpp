// The caching allocator's bookkeeping (see Note [Caching allocator] in caching_allocator.h).
// Everything runs under one mutex per device; DeviceMemory calls happen under it too, so a
// cudaMalloc never races a cudaFree of the same allocator.
#include <kiln/core/cuda/runtime/caching_allocator.h>

#include <algorithm>
#include <cstdio>
#include <exception>

#include <kiln/core/error.h>

namespace kiln::cuda {

namespace {

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

uintptr_t stream_key(const Stream& s) { return reinterpret_cast<uintptr_t>(s.handle()); }

// "1.50 GiB" for error messages.
std::string human_bytes(double n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (n >= 1024.0 && u < 5) {
    n /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", n, units[u]);
  return buf;
}

}  // namespace

bool CachingAllocator::BlockLess::operator()(const Block* a, const Block* b) const {
  if (a->pool != b->pool) return a->pool < b->pool;
  if (stream_key(a->stream) != stream_key(b->stream)) return stream_key(a->stream) < stream_key(b->stream);
  if (a->size != b->size) return a->size < b->size;
  return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
}

size_t CachingAllocator::round_size(size_t nbytes) {
  return nbytes < kMinBlockSize ? kMinBlockSize : round_up(nbytes, kMinBlockSize);
}

size_t CachingAllocator::segment_size(size_t size) {
  if (size <= kSmallSize) return kSmallSegment;
  if (size < kMinLargeAlloc) return kLargeSegment;
  return round_up(size, kRoundLarge);
}

CachingAllocator::CachingAllocator(DeviceMemory& memory, std::string device_name)
    : memory_(memory), device_name_(std::move(device_name)) {}

CachingAllocator::~CachingAllocator() {
  try {
    empty_cache();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: releasing the %s memory cache failed: %s\n", device_name_.c_str(), e.what());
  }
  // Blocks still live or pending keep their Block records (and segments): freeing the records
  // would leave dangling neighbours for a late free.
}

void* CachingAllocator::allocate(size_t nbytes, Stream stream) {
  if (nbytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  if (nbytes > (size_t(1) << 62)) throw_out_of_memory(nbytes);  // would overflow the rounding
  const size_t size = round_size(nbytes);
  if (captures_underway_ == 0) process_events();  // Note [Graph pools]: no event queries while capturing
  const bool small = size <= kSmallSize;
  Pool& pool = small ? small_ : large_;
  const PoolId pool_id = capturing_pool(stream);
  Block* b = take_free_block(pool, size, stream, pool_id);
  if (b == nullptr) {
    const size_t seg = segment_size(size);
    void* p = memory_.raw_malloc(seg);
    if (p == nullptr && captures_underway_ == 0) {  // cudaFree would break a capture: no retry then
      ++stats_.num_alloc_retries;
      release_cached_segments();
      p = memory_.raw_malloc(seg);
    }
    if (p == nullptr) throw_out_of_memory(nbytes);
    ++stats_.num_device_mallocs;
    stats_.reserved_bytes += static_cast<int64_t>(seg);
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    b = new Block(static_cast<char*>(p), seg, stream, small);
    b->pool = pool_id;
  }
  // b is in no pool now. Split off what the request does not need when the rest is useful.
  const size_t rest = b->size - size;
  if (small ? rest >= kMinBlockSize : rest > kSmallSize) {
    Block* r = new Block(b->ptr + size, rest, stream, small);
    r->pool = b->pool;
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = size;
    pool.insert(r);
  }
  b->allocated = true;
  live_.emplace(b->ptr, b);
  ++stats_.num_allocs;
  stats_.allocated_bytes += static_cast<int64_t>(b->size);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return b->ptr;
}

CachingAllocator::Block* CachingAllocator::take_free_block(Pool& pool, size_t size, Stream stream, PoolId pool_id) {
  Block key(nullptr, size, stream, false);
  key.pool = pool_id;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->pool != pool_id || stream_key((*it)->stream) != stream_key(stream)) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  KILN_CHECK(it != live_.end(), "CUDA caching allocator (", device_name_, "): free of ", ptr,
             ", which is not a live block of this allocator (a double free, or memory from elsewhere)");
  Block* b = it->second;
  live_.erase(it);
  b->allocated = false;
  stats_.allocated_bytes -= static_cast<int64_t>(b->size);
  if (captures_underway_ > 0) {  // Note [Graph pools]
    PoolId holder = capturing_pool(b->stream);
    const bool own_block = holder != 0 && b->pool == holder && b->stream_uses.empty();
    if (!own_block) {
      // A block the capture may use on replay (from outside its pool, or used on its stream through
      // record_stream): out of every pool, and never merged, until release_pool.
      if (holder == 0)
        for (const Stream& s : b->stream_uses)
          if ((holder = capturing_pool(s)) != 0) break;
      if (holder != 0) {
        ++b->pending_events;
        pools_.at(holder).held.push_back(b);
        return;
      }
      if (!b->stream_uses.empty()) {  // other streams' work: its events once the capture is over
        ++b->pending_events;
        deferred_frees_.push_back(b);
        return;
      }
    }
  }
  if (b->stream_uses.empty()) {
    return_block(b);
    return;
  }
  free_with_events(b);
}

void CachingAllocator::free_with_events(Block* b) {
  // Used on other streams: reusable once the work queued there so far has finished. If an event
  // cannot be recorded the block is never reused (leaked), which is safe: its count is raised
  // first, so it never drops to zero, and a freed neighbour does not merge it (is_free).
  std::vector<Stream> uses = std::move(b->stream_uses);
  b->stream_uses.clear();
  for (const Stream& s : uses) {
    ++b->pending_events;
    void* event = memory_.record_event(s);
    pending_.emplace_back(event, b);
  }
}

void CachingAllocator::return_block(Block* b) {
  Pool& pool = pool_of(b);
  auto is_free = [](const Block* n) { return n && !n->allocated && n->pending_events == 0; };
  if (Block* p = b->prev; is_free(p)) {  // p is in the pool: take it out before its size changes
    pool.erase(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    delete b;
    b = p;
  }
  if (Block* n = b->next; is_free(n)) {
    pool.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    delete n;
  }
  pool.insert(b);
}

void CachingAllocator::process_events() {
  size_t kept = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    auto [event, b] = pending_[i];
    if (!memory_.event_done(event)) {
      pending_[kept++] = pending_[i];
      continue;
    }
    memory_.destroy_event(event);
    if (--b->pending_events == 0) return_block(b);
  }
  pending_.resize(kept);
}

void CachingAllocator::synchronize_and_process_events() {
  for (auto& [event, b] : pending_) memory_.synchronize_event(event);
  process_events();
}

void CachingAllocator::release_cached_segments() {
  if (captures_underway_ > 0) return;  // cudaFree (and waiting for events) would break the capture
  synchronize_and_process_events();
  for (Pool* pool : {&small_, &large_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      // Part of a segment still in use, or of a graph's private pool (Note [Graph pools]).
      if (b->prev != nullptr || b->next != nullptr || b->pool != 0) {
        ++it;
        continue;
      }
      memory_.raw_free(b->ptr);
      ++stats_.num_device_frees;
      stats_.reserved_bytes -= static_cast<int64_t>(b->size);
      it = pool->erase(it);
      delete b;
    }
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_segments();
}

void CachingAllocator::record_stream(void* ptr, Stream stream) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  KILN_CHECK(it != live_.end(), "record_stream: ", ptr, " on ", device_name_,
             " is not the start of a live block of Kiln's CUDA caching allocator");
  Block* b = it->second;
  if (stream == b->stream) return;
  for (const Stream& s : b->stream_uses)
    if (s == stream) return;
  b->stream_uses.push_back(stream);
}

CachingAllocator::PoolId CachingAllocator::capturing_pool(const Stream& stream) const {
  if (captures_underway_ == 0) return 0;
  for (const auto& [id, p] : pools_)
    if (p.capturing && p.stream == stream) return id;
  return 0;
}

CachingAllocator::PoolId CachingAllocator::create_pool() {
  std::lock_guard<std::mutex> lock(mu_);
  const PoolId id = next_pool_++;
  pools_.emplace(id, PrivatePool{});
  return id;
}

void CachingAllocator::begin_allocate_to_pool(PoolId pool, Stream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pools_.find(pool);
  KILN_CHECK(it != pools_.end(), "CUDA caching allocator (", device_name_, "): begin_allocate_to_pool: no private "
             "pool ", pool, " (create_pool() makes one; a released pool cannot be reused)");
  KILN_CHECK(!it->second.capturing, "CUDA caching allocator (", device_name_, "): private pool ", pool,
             " is already capturing");
  KILN_CHECK(capturing_pool(stream) == 0, "CUDA caching allocator (", device_name_, "): stream ", stream.handle(),
             " is already allocating into private pool ", capturing_pool(stream), "; one capture per stream");
  it->second.capturing = true;
  it->second.stream = stream;
  ++captures_underway_;
}

void CachingAllocator::end_allocate_to_pool(PoolId pool) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pools_.find(pool);
  KILN_CHECK(it != pools_.end() && it->second.capturing, "CUDA caching allocator (", device_name_,
             "): end_allocate_to_pool: private pool ", pool, " is not capturing");
  it->second.capturing = false;
  if (--captures_underway_ > 0) return;
  std::vector<Block*> deferred = std::move(deferred_frees_);
  deferred_frees_.clear();
  for (Block* b : deferred) {
    --b->pending_events;
    free_with_events(b);
  }
}

void CachingAllocator::release_pool(PoolId pool) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pools_.find(pool);
  KILN_CHECK(it != pools_.end(), "CUDA caching allocator (", device_name_, "): release_pool: no private pool ", pool);
  KILN_CHECK(!it->second.capturing, "CUDA caching allocator (", device_name_, "): release_pool: private pool ", pool,
             " is still capturing (end the capture first)");
  std::vector<Block*> held = std::move(it->second.held);
  pools_.erase(it);
  // Every block of the pool's segments moves to the ordinary cache: free ones are re-sorted (their
  // key changes), live ones return there when freed.
  for (Pool* set : {&small_, &large_}) {
    std::vector<Block*> moved;
    for (auto b = set->begin(); b != set->end();) {
      if ((*b)->pool != pool) {
        ++b;
        continue;
      }
      moved.push_back(*b);
      b = set->erase(b);
    }
    for (Block* b : moved) {
      b->pool = 0;
      set->insert(b);
    }
  }
  for (auto& [ptr, b] : live_)
    if (b->pool == pool) b->pool = 0;
  for (auto& [event, b] : pending_)
    if (b->pool == pool) b->pool = 0;
  for (Block* b : deferred_frees_)
    if (b->pool == pool) b->pool = 0;
  for (auto& [id, other] : pools_)  // blocks of this pool that another capture holds
    for (Block* b : other.held)
      if (b->pool == pool) b->pool = 0;
  for (Block* b : held) {  // now free for real: the graph that might read them is gone
    if (b->pool == pool) b->pool = 0;
    if (!b->stream_uses.empty() && captures_underway_ > 0) {  // another capture: its events at its end
      deferred_frees_.push_back(b);  // keeps the count the hold added, as deferred frees do
      continue;
    }
    --b->pending_events;
    if (!b->stream_uses.empty())
      free_with_events(b);
    else if (b->pending_events == 0)
      return_block(b);
  }
}

bool CachingAllocator::capture_underway() const {
  std::lock_guard<std::mutex> lock(mu_);
  return captures_underway_ > 0;
}

bool CachingAllocator::owns(void* ptr) const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.count(ptr) != 0;
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  MemoryStats s = stats_;
  std::set<const Block*> blocks;  // a block waiting on several streams appears once per event
  for (const auto& [event, b] : pending_) blocks.insert(b);
  s.pending_frees = static_cast<int64_t>(blocks.size());
  return s;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

std::vector<CachingAllocator::SegmentInfo> CachingAllocator::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  // Every segment head (prev == nullptr) is in a pool, live, or pending.
  std::set<const Block*> heads;
  auto add_head = [&](const Block* b) {
    while (b->prev) b = b->prev;
    heads.insert(b);
  };
  for (const Pool* pool : {&small_, &large_})
    for (const Block* b : *pool) add_head(b);
  for (const auto& [ptr, b] : live_) add_head(b);
  for (const auto& [event, b] : pending_) add_head(b);
  std::vector<SegmentInfo> out;
  for (const Block* h : heads) {
    SegmentInfo seg{reinterpret_cast<uintptr_t>(h->ptr), 0, h->small, h->stream.handle(), h->pool, {}};
    for (const Block* b = h; b; b = b->next) {
      seg.blocks.push_back({static_cast<size_t>(b->ptr - h->ptr), b->size, b->allocated, b->pending_events > 0});
      seg.size += b->size;
    }
    out.push_back(std::move(seg));
  }
  std::sort(out.begin(), out.end(), [](const SegmentInfo& a, const SegmentInfo& b) { return a.address < b.address; });
  return out;
}

void CachingAllocator::throw_out_of_memory(size_t nbytes) {
  ++stats_.num_ooms;
  std::string device_part;
  try {
    size_t free_bytes = 0, total_bytes = 0;
    memory_.memory_info(free_bytes, total_bytes);
    device_part = detail::str_cat("; the device has ", human_bytes(double(total_bytes)), " total (",
                                  total_bytes, " bytes), ", human_bytes(double(free_bytes)), " free (", free_bytes,
                                  " bytes)");
  } catch (const std::exception& e) {
    device_part = detail::str_cat("; the device's free memory is unknown (", e.what(), ")");
  }
  KILN_FAIL_AS(OutOfMemoryError, "CUDA out of memory on ", device_name_, ": tried to allocate ",
                human_bytes(double(nbytes)), " (", nbytes, " bytes); Kiln has ",
                human_bytes(double(stats_.allocated_bytes)), " (", stats_.allocated_bytes,
                " bytes) allocated in tensors and ", human_bytes(double(stats_.reserved_bytes)), " (",
                stats_.reserved_bytes, " bytes) reserved by its cache", device_part,
                ". Free tensors you no longer need, or use smaller batches");
  __builtin_unreachable();
}

}  // namespace kiln::cuda
