// Kiln's CUDA settings and queries for users, as torch.cuda and torch.backends offer them: devices,
// TF32 and cuDNN switches, the device-check mode, memory statistics. No CUDA headers; in a build
// without CUDA the queries answer "no devices" and the switches are kept but change nothing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <kiln/core/error.h>

namespace kiln::cuda {

// True when Kiln was compiled with CUDA. Op fronts branch on it (Note [One dispatch line] in
// core/ops/backend.h, in the source tree), so a build without CUDA never references the CUDA launchers.
#if KILN_WITH_CUDA
inline constexpr bool kBuilt = true;
#else
inline constexpr bool kBuilt = false;
#endif

// ---- devices (torch.cuda.device_count, is_available, set_device, synchronize) ----
/// Usable devices; 0 when built without CUDA or without a driver/GPU.
int device_count();
inline bool is_available() { return device_count() > 0; }
/// "CUDA runtime 13.0, cuBLASLt 13.x, cuDNN 9.x" or "built without CUDA".
std::string build_info();
int current_device();
void set_device(int device);
void synchronize(int device = -1);  ///< blocks until the whole device (-1: the current one) is idle
/// Whether this thread is capturing a CUDA graph now (torch.cuda.is_current_stream_capturing; Note
/// [CUDA graphs] in core/cuda/runtime/graph.h, in the source tree); always false without CUDA.
bool is_capturing();

// ---- math switches, read at each call; defaults are torch's ----
/// TF32 for f32 matrix products (torch.backends.cuda.matmul.allow_tf32, default false): inputs
/// rounded to 10-bit mantissas on the tensor cores, accumulated in f32.
void set_allow_tf32(bool allow);
bool allow_tf32();
/// cuDNN convolutions (torch.backends.cudnn.*). benchmark (false): true times every algorithm on
/// the first call with a shape (a device sync) instead of cuDNN's heuristics. deterministic
/// (false): only algorithms cuDNN reports as deterministic. allow_tf32 (true): f32 convolutions
/// may use TF32 tensor cores.
bool cudnn_benchmark();
void set_cudnn_benchmark(bool on);
bool cudnn_deterministic();
void set_cudnn_deterministic(bool on);
bool cudnn_allow_tf32();
void set_cudnn_allow_tf32(bool on);

// ---- attention kernels (KILN_ATTENTION) ----
/// Which fused kernels run scaled_dot_product_attention on CUDA (Note [Attention kernel choice] in
/// core/cuda/kernels/fused_attention.cpp, in the source tree). kiln: Kiln's flash kernels. cudnn: cuDNN's
/// fused flash attention, and an error naming why where cuDNN cannot take the case. automatic: cuDNN where it
/// has an engine (the default since the first GPU run proved it: 2.8-4x Kiln's kernels on an H200), Kiln's
/// kernels elsewhere. Under set_cudnn_deterministic(true), automatic takes Kiln's kernels (cuDNN's backward adds
/// dQ with atomics) and cudnn is an error. CPU attention ignores the switch.
enum class AttentionBackend { automatic, cudnn, kiln };
/// The first call reads KILN_ATTENTION (auto | cudnn | kiln; unset: auto) unless set_attention_backend
/// came first; a bad value throws from every call until the setter is used.
AttentionBackend attention_backend();
void set_attention_backend(AttentionBackend backend);
/// "auto" | "cudnn" | "kiln" to the enum; anything else throws naming the value and the choices.
AttentionBackend parse_attention_backend(const std::string& name);
const char* attention_backend_name(AttentionBackend backend);  ///< "auto", "cudnn", "kiln"

// ---- cross-entropy kernels (KILN_CROSS_ENTROPY_KERNEL) ----
/// Which form of the fused cross-entropy kernels runs on CUDA (Note [Cross-entropy kernels] in
/// core/cuda/kernels/cross_entropy.cu, in the source tree). accurate: one pass over each row with
/// an online max and sum, libm-accurate expf (the first form). fast: the same pass with exp2f of
/// x * log2(e) (within 2 ulp plus the product's rounding), and a backward that issues four loads
/// before it computes. registers: a forward that holds the row in registers (rows up to 57,344
/// 16-bit, 28,672 f32 or 14,336 f64 values, and f32 rows of 897-1024 and f64 rows of 449-1024 values
/// take fast too), finds the max, then adds exp(x - max)
/// without a dependency from one element to the next; the backward as fast. f64 logits use exp in
/// every form. The results differ between forms by rounding only; the GPU test compares each with
/// the CPU. CPU cross entropy ignores the switch. registers is the default since its first GPU run
/// (an H200, 2026-11-28: gpt2-124m's (16384, 50257) bf16 forward 1.10 ms against accurate's 1.81 and
/// fast's 1.59; backward 1.21 against 1.23).
enum class CrossEntropyKernel { accurate, fast, registers };
/// The first call reads KILN_CROSS_ENTROPY_KERNEL (accurate | fast | registers; unset: registers)
/// unless set_cross_entropy_kernel came first; a bad value throws from every call until the setter is used.
CrossEntropyKernel cross_entropy_kernel();
void set_cross_entropy_kernel(CrossEntropyKernel kernel);
/// "accurate" | "fast" | "registers" to the enum; anything else throws naming the value and the choices.
CrossEntropyKernel parse_cross_entropy_kernel(const std::string& name);
const char* cross_entropy_kernel_name(CrossEntropyKernel kernel);  ///< "accurate", "fast", "registers"

// ---- column reductions (KILN_CUDA_REDUCE_COLS) ----
/// Note [Vector columns] (core/cuda/plan/reduce_plan.h): a CUDA reduction over a leading dim (the
/// bias gradient: (N, C) summed over N) reads one column per thread (scalar) or up to 16 bytes of
/// adjacent columns per thread with one load (vector: 16 for sums; max/min of 16-bit values, whose
/// accumulators are larger, 8; where C is a multiple of the width and the data aligned). Where both
/// use 32 threads across columns (a sum over C >= 256 16-bit or 128 f32 values) they sum each column
/// in the same order: bitwise equal results. vector is the default since its
/// first GPU run (an H200, 2026-11-28: 1.25-1.62x scalar on GPT's bias gradients, (16384, 768) to
/// (16384, 8192) bf16; gpt2-124m's step 41.5 -> 40.9 ms).
/// The first call reads KILN_CUDA_REDUCE_COLS (scalar | vector; unset: vector) unless
/// set_vector_column_reductions came first; a bad value throws naming it.
bool vector_column_reductions();
void set_vector_column_reductions(bool on);

// ---- layer-norm kernel variant (KILN_LAYER_NORM_VARIANT) ----
/// Note [Layer norm variants]
/// What is unknown about the layer-norm kernels until a GPU times them, each a field:
/// - vec_bytes: the width of each load and store, 16 (a 16-byte vector: 8 bf16, 4 f32), 8 (half
///   that) or 0 (one element). Wider vectors need fewer instructions; narrower ones spread a short
///   row over more threads. Vectors are used only where the row length and pointers allow
///   (can_vectorize); elsewhere the kernels go element by element whatever the variant says.
/// - fwd_rows: the forward's launch: one warp per row (4 rows per block), one block per row, or
///   automatic (a warp up to kWarpRowMax values, a block beyond: Note [Row launches] in
///   core/cuda/plan/row_math.h, in the source tree).
/// - bwd_blocks: the backward's blocks (each sums its rows' dγ/dβ partials, a second kernel adds
///   the partials): more blocks, more parallel rows, more partials to add.
/// - bwd_partials: where a block keeps its partials while it runs: shared memory (when they fit in
///   46 KiB) or global memory.
/// - bwd: the backward's form. fused: one kernel writes grad_x and sums dγ/dβ partials, a block per
///   run of rows (bwd_blocks of them, bwd_partials where). split: grad_x with the forward's launch,
///   then dγ/dβ in a kernel over column tiles and runs of rows (about bwd_blocks blocks in all);
///   Note [Split layer-norm backward] in core/cuda/kernels/layer_norm.cu, in the source tree.
/// Every variant computes the same sums in the same order per row: the forward's output, mean and
/// rstd do not depend on the variant except through the warp/block reduction tree, and the
/// backward's per-row sums likewise; dγ/dβ add the same rows in a different grouping. The GPU test
/// compares every sweep candidate (core/cuda/plan/layer_norm_variant.h) with the CPU.
/// The defaults are the first GPU run's fastest (bench_cuda --sweep on an H200, 2026-11-28, bf16 rows
/// of 768 and 2048): a warp per row forward (1.07x and 1.34x the automatic launch) and 264 backward
/// blocks, twice an H100/H200's 132 SMs (1.30x and 1.81x the former 1024; 528 was 1.36x and 1.71x).
/// The block count is a constant, not the device's SM count, so that dγ/dβ add in the same order on
/// every GPU. The split backward is the default since call 6 of that day (H200): 0.062 ms against the
/// fused form's 0.130 at rows of 768 and 0.138 against 0.166 at 2048; 264 blocks was the fastest of
/// 264, 528, 1056 and 2112.
struct LayerNormVariant {
  enum class Rows { automatic, warp, block };
  enum class Partials { automatic, shared, global };
  enum class Backward { fused, split };
  int vec_bytes = 16;
  Rows fwd_rows = Rows::warp;
  int64_t bwd_blocks = 264;
  Partials bwd_partials = Partials::automatic;
  Backward bwd = Backward::split;
  bool operator==(const LayerNormVariant&) const = default;
};

/// The name layer_norm_variant_name prints, e.g. "vec=16,fwd=auto,bwd_blocks=1024,partials=auto,bwd=fused".
std::string layer_norm_variant_name(const LayerNormVariant& variant);
/// "" or "default": the defaults. Otherwise comma-separated key=value pairs, any subset, in any
/// order: vec=16|8|0, fwd=auto|warp|block, bwd_blocks=1..65535, partials=auto|shared|global,
/// bwd=fused|split.
/// Anything else is a ValueError naming the text and the choices.
LayerNormVariant parse_layer_norm_variant(std::string_view text);
/// The launch configuration of the CUDA layer-norm kernels, for a run that times them
/// (bench_cuda --sweep). The first
/// call reads KILN_LAYER_NORM_VARIANT (e.g. vec=8,fwd=block; unset: the defaults) unless
/// set_layer_norm_variant came first; a bad value throws ValueError from every call until the
/// setter is used. Every variant gives the same results to rounding.
LayerNormVariant layer_norm_variant();
void set_layer_norm_variant(const LayerNormVariant& variant);

// ---- device-side checks (Note [Deferred device checks] in core/cuda/runtime/deferred_check.h, in the source tree, in the source
// tree) ----
/// deferred (default): a bad index or class target found by a kernel is reported at the next
/// blocking read, without a host sync per op. immediate (KILN_CUDA_CHECKS=immediate, like
/// CUDA_LAUNCH_BLOCKING): each op reads its check and throws at once.
enum class CheckMode { deferred, immediate };
CheckMode check_mode();
void set_check_mode(CheckMode mode);
/// Raises the first fault among the deferred checks that reached the host; with `wait`, waits
/// for all of them first (a host sync while any is pending).
void check_deferred_faults(bool wait = false);

// ---- memory (torch.cuda.memory_stats, reset_peak_memory_stats, empty_cache) ----
/// The device had no room even after the allocator gave its cached memory back. The message says
/// how many bytes were asked, what Kiln holds, and the device's total and free memory.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

/// One device's allocator statistics. Byte counts are of blocks (requests rounded up to 512 B).
struct MemoryStats {
  int64_t allocated_bytes = 0;       ///< in blocks handed out to tensors now
  int64_t reserved_bytes = 0;        ///< in segments obtained with cudaMalloc (allocated + cached)
  int64_t peak_allocated_bytes = 0;  ///< since the start or the last reset_peak_stats()
  int64_t peak_reserved_bytes = 0;
  int64_t num_allocs = 0;            ///< allocations served, from the cache or not
  int64_t num_device_mallocs = 0;    ///< cudaMalloc calls (each a new segment)
  int64_t num_device_frees = 0;      ///< cudaFree calls (each a whole segment given back)
  int64_t num_alloc_retries = 0;     ///< cudaMalloc failures answered by freeing the cache and retrying
  int64_t num_ooms = 0;              ///< allocations that ended in OutOfMemoryError
  int64_t pending_frees = 0;         ///< freed blocks waiting for other streams (see record_stream)
};

/// Statistics of `device` (-1: the current device).
MemoryStats memory_stats(int device = -1);
/// Peaks restart from the current values.
void reset_peak_stats(int device = -1);
/// Gives every cached segment that holds no live block back to the driver, on every device, and
/// frees the cached pinned host blocks. Memory in live tensors stays where it is.
void empty_cache();

}  // namespace kiln::cuda
