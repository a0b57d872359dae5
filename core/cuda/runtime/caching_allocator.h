// The bookkeeping of Kiln's caching device allocator, free of CUDA so the CPU tests check it:
// segments carved into blocks, best-fit reuse per stream, splitting and coalescing, deferred
// frees for blocks used on other streams, statistics, and the out-of-memory retry. The CUDA
// allocator (device_allocator.cpp) plugs cudaMalloc/cudaFree and cudaEvents in through
// DeviceMemory. See Note [Caching allocator].
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <kiln/core/cuda/runtime/allocator.h>
#include <kiln/core/cuda/runtime/stream.h>

// Note [Caching allocator]
// cudaMalloc and cudaFree are slow and synchronize the device, so memory is obtained in
// segments and kept. Requests round up to 512 bytes. Those up to 1 MiB ("small") come from 2 MiB
// segments; larger ones from 20 MiB segments when under 10 MiB, else from a segment of their
// own rounded up to 2 MiB. A request takes the smallest free block that fits (best fit); a
// block with enough left over is split (small: >= 512 B left, large: > 1 MiB left), and a
// freed block merges with free neighbours of its segment, so a segment whose blocks are all
// free is one block again and empty_cache() can give it back.
//
// Streams: a block belongs to the stream that was current when it was allocated, and a freed
// block is reused only by allocations on that stream. Work on one stream runs in order, so a
// kernel that reads the old tensor is queued before any kernel that writes the new one: freeing
// on the host while the device still works is safe without a sync. A tensor used on another
// stream breaks that order; record_stream(t, s) notes s, and the free of such a block records
// an event on every noted stream and keeps the block out of the pools until those events have
// completed (checked at each allocation; empty_cache and the out-of-memory path wait for them).
//
// Out of memory: when cudaMalloc fails, every cached segment that is entirely free is released
// and cudaMalloc is tried once more; a second failure throws OutOfMemoryError.
//
// Note [Graph pools]
// A CUDA graph replays the addresses its capture used, so the memory it touched must stay its own
// for as long as the graph lives (torch's private memory pools). create_pool() makes a private
// pool; between begin_allocate_to_pool(pool, stream) and end_allocate_to_pool(pool) every
// allocation on `stream` comes from that pool's segments (new ones when none fits), and nothing
// else ever takes them: a block of the pool freed during the capture is reused by later
// allocations of the same capture (stream order makes that safe on replay too), a block freed
// after it waits for the next capture into the pool. A block from outside the pool freed on the
// capturing stream during the capture (an earlier step's tensor the graph may read last) is held
// by the pool, as is a pool block that other streams used, until release_pool(pool), when the
// graph is gone: its free segments then join the ordinary cache and its held blocks are freed.
// A block of another stream that record_stream marked as used on the capturing stream is held the
// same way. While a capture is under way no event is queried or recorded and nothing is given back
// to the device (CUDA forbids all three during a capture): pending frees wait for its end,
// empty_cache() does nothing, and an allocation that finds no memory throws OutOfMemoryError at
// once instead of retrying after a cudaFree. empty_cache() leaves a live pool's segments alone.

namespace kiln::cuda {

// What the allocator asks of one device. CUDA's implementation is in device_allocator.cpp;
// tests use a fake.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual void* raw_malloc(size_t nbytes) = 0;  // nullptr when the device is out of memory
  virtual void raw_free(void* ptr) = 0;
  virtual void* record_event(Stream stream) = 0;  // an event after the work queued on `stream`
  virtual bool event_done(void* event) = 0;
  virtual void synchronize_event(void* event) = 0;
  virtual void destroy_event(void* event) noexcept = 0;
  virtual void memory_info(size_t& free_bytes, size_t& total_bytes) = 0;  // for error messages
};

class CachingAllocator {
 public:
  static constexpr size_t kMinBlockSize = 512;             // every size is a multiple of this
  static constexpr size_t kSmallSize = size_t(1) << 20;     // requests up to 1 MiB are small
  static constexpr size_t kSmallSegment = size_t(2) << 20;  // small blocks come from 2 MiB segments
  static constexpr size_t kMinLargeAlloc = size_t(10) << 20;
  static constexpr size_t kLargeSegment = size_t(20) << 20;  // large requests under 10 MiB
  static constexpr size_t kRoundLarge = size_t(2) << 20;     // larger ones: rounded to 2 MiB

  // `memory` must outlive the allocator; `device_name` ("cuda:0") appears in error messages.
  CachingAllocator(DeviceMemory& memory, std::string device_name);
  // Gives back cached segments; blocks still handed out are left alone (their owners free them
  // through a dead allocator only in a buggy program).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `nbytes` for use on `stream`; nullptr for 0 bytes.
  void* allocate(size_t nbytes, Stream stream);
  // Returns a block from allocate() (nullptr is ignored); throws kiln::Error for anything else.
  void free(void* ptr);
  // The block at `ptr` (as allocate returned it) is also used on `stream`.
  void record_stream(void* ptr, Stream stream);
  // Gives back every segment that holds no live block, after waiting for deferred frees.
  void empty_cache();
  bool owns(void* ptr) const;  // ptr is a live block of this allocator

  MemoryStats stats() const;
  void reset_peak_stats();

  // Private pools for CUDA graphs (Note [Graph pools]). Pool 0 is the ordinary cache.
  using PoolId = uint64_t;
  PoolId create_pool();
  // Allocations on `stream` come from `pool` until end_allocate_to_pool(pool). One capture per
  // pool and per stream at a time.
  void begin_allocate_to_pool(PoolId pool, Stream stream);
  void end_allocate_to_pool(PoolId pool);
  // The pool's graph is gone: its segments join the ordinary cache, its held blocks are freed.
  // Not while it is capturing.
  void release_pool(PoolId pool);
  bool capture_underway() const;

  // The segments and their blocks in address order, for tests and debugging.
  struct BlockInfo {
    size_t offset;  // from the segment's start
    size_t size;
    bool allocated;
    bool pending;  // freed, waiting for events of other streams
  };
  struct SegmentInfo {
    uintptr_t address;
    size_t size;
    bool small;
    void* stream;  // the stream handle the segment serves
    uint64_t pool;  // 0: the ordinary cache; else the private pool (Note [Graph pools])
    std::vector<BlockInfo> blocks;
  };
  std::vector<SegmentInfo> snapshot() const;

  static size_t round_size(size_t nbytes);
  static size_t segment_size(size_t size);  // for a request already rounded

 private:
  struct Block {
    Block(char* p, size_t n, Stream s, bool is_small) : ptr(p), size(n), stream(s), small(is_small) {}
    char* ptr;
    size_t size;
    Stream stream;
    bool small;
    PoolId pool = 0;  // Note [Graph pools]; every block of a segment has its segment's pool
    bool allocated = false;
    int pending_events = 0;  // events still to complete before the block can be reused
    Block* prev = nullptr;   // neighbours in the same segment
    Block* next = nullptr;
    std::vector<Stream> stream_uses;  // other streams that used the block (record_stream)
  };
  // Ordered by (pool, stream, size, address): lower_bound finds the best fit on a stream.
  struct BlockLess {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockLess>;

  Pool& pool_of(const Block* b) { return b->small ? small_ : large_; }
  Block* take_free_block(Pool& pool, size_t size, Stream stream, PoolId pool_id);
  void return_block(Block* b);
  void process_events();
  void synchronize_and_process_events();
  void release_cached_segments();
  [[noreturn]] void throw_out_of_memory(size_t nbytes);

  DeviceMemory& memory_;
  std::string device_name_;
  mutable std::mutex mu_;
  Pool small_, large_;
  std::unordered_map<void*, Block*> live_;          // handed-out blocks by address
  std::vector<std::pair<void*, Block*>> pending_;    // (event, block) of deferred frees
  MemoryStats stats_;
  struct PrivatePool {
    bool capturing = false;
    Stream stream;             // while capturing
    std::vector<Block*> held;  // freed, kept for the graph until release_pool
  };
  std::unordered_map<PoolId, PrivatePool> pools_;
  PoolId next_pool_ = 1;
  int captures_underway_ = 0;
  std::vector<Block*> deferred_frees_;  // freed with other streams' uses during a capture: events at its end
  PoolId capturing_pool(const Stream& stream) const;  // 0 when no capture allocates on `stream`
  void free_with_events(Block* b);
};

}  // namespace kiln::cuda
