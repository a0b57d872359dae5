// GEMM on CUDA through cuBLASLt (matmul.h): Kiln's row-major products as column-major cuBLASLt
// calls, with descriptors and algorithms cached per problem, one handle per device and one
// workspace per stream. Host code only: every kernel is cuBLASLt's.
#include <kiln/core/cuda/kernels/matmul.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include <kiln/core/cuda/runtime/check.cuh>
#include <kiln/core/cuda/plan/gemm_plan.h>
#include <kiln/core/cuda/runtime/stream.h>

// A failed cuBLASLt call: the status name and string, and the call.
#define KILN_CUBLAS_CHECK(expr)                                                                   \
  do {                                                                                            \
    cublasStatus_t kiln_status_ = (expr);                                                         \
    KILN_CHECK(kiln_status_ == CUBLAS_STATUS_SUCCESS, "cuBLASLt error ",                         \
               cublasLtGetStatusName(kiln_status_), " (", cublasLtGetStatusString(kiln_status_), \
               ") in ", #expr);                                                                   \
  } while (0)

namespace kiln::cuda {

namespace {

// Note [cuBLASLt GEMM]
// Kiln's matrices are row-major, cuBLASLt's column-major. A row-major (M, N) matrix holds the bytes
// of its transpose stored column-major, so C = a @ b is computed as C^T = b^T a^T: cuBLASLt's "A"
// is our b, its "B" is our a, and its D is (N, M) column-major with ld N, i.e. our contiguous C.
// An operand with unit stride along its last dim goes in as it is stored (op N); one with unit
// stride down its rows (a transposed view, strides (1, ld)) goes in with op T; anything else is
// first copied to contiguous. The bias, one value per output feature (column of C), is then one
// value per row of D: what CUBLASLT_EPILOGUE_BIAS adds (a vector as long as D has rows), and the
// GELU epilogue's aux output (the pre-activation) has D's layout.
// Batch dims collapse, where their strides allow, into one strided batch per call; a broadcast
// dim has batch offset 0, which cuBLASLt accepts (NVIDIA's MatX relies on it for A/B). Dims that
// do not collapse are looped over on the host. A product whose batches are a contiguous stack of
// row-major matrices against one shared matrix is a single GEMM with batch*M rows (the linear
// layer on (B, T, C) inputs), as on the CPU. gemm_plan.h plans these calls (tested on the CPU).
// Descriptors, layouts and the heuristic's algorithm are cached per thread, keyed by everything the
// heuristic sees: dtype, TF32, epilogue, transposes, sizes, lds, batch count and strides, and the
// alignment of every pointer (it cannot see the pointers themselves, so it is told the alignment
// and picks only kernels that work with it). The hot path is then one hash lookup, and setting the
// per-call bias/aux pointers on a cached descriptor races with no other thread.

using namespace gemm_plan;

constexpr int kMaxDevices = 16;
constexpr size_t kMaxCachedPlans = 4096;  // per thread; the cache starts over past this

cudaDataType_t data_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f64: return CUDA_R_64F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: break;
  }
  KILN_UNREACHABLE("matmul: no cuBLASLt data type for ", t);
  return CUDA_R_32F;
}

// --- handles and workspaces ------------------------------------------------------------------

cublasLtHandle_t handle_for(int device) {
  KILN_CHECK(device >= 0 && device < kMaxDevices, "matmul: CUDA device index ", device, " is out of range [0, ",
             kMaxDevices, ")");
  // Created once per device and never destroyed (like the stream pools): destroying them during
  // static destruction would race the CUDA runtime's own teardown.
  static std::array<cublasLtHandle_t, kMaxDevices> handles{};
  static std::array<std::once_flag, kMaxDevices> created;
  std::call_once(created[device], [&] {
    DeviceGuard guard(device);
    KILN_CUBLAS_CHECK(cublasLtCreate(&handles[device]));
  });
  return handles[device];
}

// cuBLAS's recommendation (cublasSetWorkspace): 32 MiB on Hopper and newer, 4 MiB before.
size_t workspace_bytes(int device) {
  int major = 0;
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return (major >= 9 ? 32 : 4) * (size_t(1) << 20);
}

struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};

// One scratch buffer per (device, stream), a tensor from the device allocator made on first use.
// Calls on one stream run in order, so they can share it; calls on other streams get their own.
Workspace workspace_for(int device, cudaStream_t stream) {
  static std::mutex mu;
  static auto* spaces = new std::map<std::pair<int, cudaStream_t>, Tensor>();  // leaked, see handle_for
  std::lock_guard<std::mutex> lock(mu);
  auto it = spaces->find({device, stream});
  if (it == spaces->end()) {
    Tensor t = empty({static_cast<int64_t>(workspace_bytes(device))}, DType::u8, Device::cuda(device));
    it = spaces->emplace(std::make_pair(device, stream), std::move(t)).first;
  }
  return {it->second.data_ptr(), it->second.nbytes()};
}

struct Context {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t handle = nullptr;
  Workspace workspace;
  bool tf32 = false;
};

// The current stream of t's device (made current, as every launcher does), its handle and workspace.
Context context_for(const Tensor& t) {
  Context c;
  c.device = t.device().index;
  set_device(c.device);
  c.stream = static_cast<cudaStream_t>(current_stream(c.device).handle());
  c.handle = handle_for(c.device);
  c.workspace = workspace_for(c.device, c.stream);
  c.tf32 = allow_tf32();
  return c;
}

// --- operands and epilogues -----------------------------------------------------------------

// t itself when cuBLASLt can read its matrices in place, else a contiguous copy.
Tensor lt_readable(const Tensor& t) { return lt_matrix(t) ? t : t.contiguous(); }

// The largest power of two up to 16 dividing every address a batch of matrices starts at and,
// when given, the leading dimension in bytes: cuBLASLt's alignment requirements cover the pointer,
// the leading dimension and the batch stride (CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_*_BYTES), and the
// preference only tells it the pointer's, so it is told the weakest of the three.
uint32_t alignment(const void* p, int64_t batch_stride_bytes, int64_t ld_bytes = 0) {
  const uintptr_t bits = reinterpret_cast<uintptr_t>(p) | static_cast<uintptr_t>(batch_stride_bytes) |
                         static_cast<uintptr_t>(ld_bytes);
  uint32_t a = 16;
  while (a > 1 && bits % a != 0) a /= 2;
  return a;
}

bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

enum class Epilogue : int32_t { none, bias, gelu_aux, gelu_aux_bias };

bool has_bias(Epilogue e) { return e == Epilogue::bias || e == Epilogue::gelu_aux_bias; }
bool has_aux(Epilogue e) { return e == Epilogue::gelu_aux || e == Epilogue::gelu_aux_bias; }

cublasLtEpilogue_t lt_epilogue(Epilogue e) {
  switch (e) {
    case Epilogue::none: return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::gelu_aux: return CUBLASLT_EPILOGUE_GELU_AUX;
    case Epilogue::gelu_aux_bias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}


// --- plans: descriptors, layouts and algorithm, cached ---------------------------------------

// The device pointers of one launch (cuBLASLt's A is our b, its B our a).
struct Pointers {
  const void* a = nullptr;
  const void* b = nullptr;
  void* out = nullptr;
  const void* bias = nullptr;
  void* aux = nullptr;
};

struct Plan {
  cublasLtMatmulDescOpaque_t desc{};
  cublasLtMatrixLayoutOpaque_t lay_a{}, lay_b{}, lay_out{};
  cublasLtMatmulAlgo_t algo{};
  cublasStatus_t status = CUBLAS_STATUS_NOT_SUPPORTED;  // the heuristic's; SUCCESS when algo can run
};

using PlanKey = std::array<int64_t, 22>;

struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t v : key) {
      h ^= static_cast<uint64_t>(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    }
    return static_cast<size_t>(h);
  }
};

template <class T>
void set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& value) {
  KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &value, sizeof(value)));
}
template <class T>
void set(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, const T& value) {
  KILN_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, attr, &value, sizeof(value)));
}
template <class T>
void set(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const T& value) {
  KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, attr, &value, sizeof(value)));
}

void init_layout(cublasLtMatrixLayoutOpaque_t* l, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                 int64_t count, int64_t batch_stride) {
  KILN_CUBLAS_CHECK(cublasLtMatrixLayoutInit(l, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  if (count > 1) {
    set(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<int32_t>(count));
    set(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, static_cast<int64_t>(batch_stride));
  }
}

// The bias and aux pointers live in the descriptor: set per call (the cache is per thread).
void set_epilogue_pointers(Plan& plan, const Problem& p, Epilogue e, const Pointers& ptr) {
  if (has_bias(e)) set(&plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, ptr.bias);  // (m,) = (N,)
  if (has_aux(e)) {
    set(&plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, ptr.aux);  // D's layout
    set(&plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<int64_t>(p.m));
    set(&plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, static_cast<int64_t>(p.stride_out));
  }
}

std::unique_ptr<Plan> make_plan(const Context& ctx, const Problem& p, Epilogue e, int64_t count, const Pointers& ptr,
                                const std::array<uint32_t, 3>& align) {
  auto plan = std::make_unique<Plan>();
  const cudaDataType_t type = data_type(p.dtype);
  const bool f64 = p.dtype == DType::f64;
  const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F
                                      : (p.dtype == DType::f32 && ctx.tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                            : CUBLAS_COMPUTE_32F;
  KILN_CUBLAS_CHECK(cublasLtMatmulDescInit(&plan->desc, compute, f64 ? CUDA_R_64F : CUDA_R_32F));
  set(&plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, p.mat_b.trans ? CUBLAS_OP_T : CUBLAS_OP_N);
  set(&plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, p.mat_a.trans ? CUBLAS_OP_T : CUBLAS_OP_N);
  if (e != Epilogue::none) {
    set(&plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(e));
    set_epilogue_pointers(*plan, p, e, ptr);  // the heuristic reads their alignment
  }
  init_layout(&plan->lay_b, type, p.mat_b.rows, p.mat_b.cols, p.mat_b.ld, count, p.stride_b);
  init_layout(&plan->lay_a, type, p.mat_a.rows, p.mat_a.cols, p.mat_a.ld, count, p.stride_a);
  init_layout(&plan->lay_out, type, p.m, p.n, p.m, count, p.stride_out);

  cublasLtMatmulPreferenceOpaque_t pref{};
  KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceInit(&pref));
  set(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(ctx.workspace.bytes));
  set(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align[1]);  // b
  set(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align[0]);  // a
  set(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align[2]);
  set(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align[2]);
  // Split-K partial sums are never added in place (atomics: a different order each run), and for
  // 16-bit types never in the output type: results are reproducible and accumulated in f32.
  uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_MASK & ~CUBLASLT_REDUCTION_SCHEME_INPLACE;
  if (p.dtype == DType::bf16 || p.dtype == DType::f16) reductions &= ~CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
  set(&pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reductions);

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(ctx.handle, &plan->desc, &plan->lay_b, &plan->lay_a,
                                                         &plan->lay_out, &plan->lay_out, &pref, 1, &result, &found);
  if (status == CUBLAS_STATUS_SUCCESS && found == 0) status = CUBLAS_STATUS_NOT_SUPPORTED;
  if (status == CUBLAS_STATUS_SUCCESS) status = result.state;
  plan->status = status;
  plan->algo = result.algo;
  return plan;
}

// Runs every launch of `prod` with epilogue `e` and D = a @ b + beta * D; returns false, with
// nothing launched, when cuBLASLt has no algorithm for one of them (`why` gets its status).
bool launch_all(const Context& ctx, const Product& prod, Epilogue e, const Tensor& a, const Tensor& b,
                const Tensor& out, const Tensor& bias, const Tensor& aux, double beta, cublasStatus_t* why) {
  thread_local std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> cache;
  if (cache.size() > kMaxCachedPlans) cache.clear();  // before any Plan* below is taken

  const Problem& p = prod.problem;
  const int64_t es = static_cast<int64_t>(out.element_size());
  const auto at = [es](const Tensor& t, int64_t off) { return static_cast<char*>(t.data_ptr()) + off * es; };
  std::vector<std::pair<Plan*, Pointers>> runs;
  runs.reserve(prod.launches.size());
  for (const Launch& l : prod.launches) {
    Pointers ptr;
    ptr.a = at(a, l.off_a);
    ptr.b = at(b, l.off_b);
    ptr.out = at(out, l.off_out);
    ptr.bias = has_bias(e) ? bias.data_ptr() : nullptr;
    ptr.aux = has_aux(e) ? at(aux, l.off_out) : nullptr;
    const bool batched = l.count > 1;
    const std::array<uint32_t, 3> align = {alignment(ptr.a, batched ? p.stride_a * es : 0, p.mat_a.ld * es),
                                           alignment(ptr.b, batched ? p.stride_b * es : 0, p.mat_b.ld * es),
                                           alignment(ptr.out, batched ? p.stride_out * es : 0, p.m * es)};
    const PlanKey key = {ctx.device,
                         static_cast<int64_t>(p.dtype),
                         ctx.tf32,
                         static_cast<int64_t>(e),
                         p.mat_a.trans,
                         p.mat_b.trans,
                         p.m,
                         p.n,
                         p.k,
                         p.mat_a.ld,
                         p.mat_b.ld,
                         l.count,
                         batched ? p.stride_a : 0,
                         batched ? p.stride_b : 0,
                         batched ? p.stride_out : 0,
                         align[0],
                         align[1],
                         align[2],
                         ptr.bias ? alignment(ptr.bias, 0) : 0,
                         ptr.aux ? alignment(ptr.aux, batched ? p.stride_out * es : 0, p.m * es) : 0,
                         static_cast<int64_t>(ctx.workspace.bytes),
                         0};
    auto it = cache.find(key);
    if (it == cache.end()) it = cache.emplace(key, make_plan(ctx, p, e, l.count, ptr, align)).first;
    if (it->second->status != CUBLAS_STATUS_SUCCESS) {
      if (why) *why = it->second->status;
      return false;
    }
    runs.emplace_back(it->second.get(), ptr);
  }

  const float alpha32 = 1.0f, beta32 = static_cast<float>(beta);
  const double alpha64 = 1.0, beta64 = beta;
  const bool f64 = p.dtype == DType::f64;
  const void* alpha_ptr = f64 ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta_ptr = f64 ? static_cast<const void*>(&beta64) : &beta32;
  for (auto& [plan, ptr] : runs) {
    if (e != Epilogue::none) set_epilogue_pointers(*plan, p, e, ptr);
    KILN_CUBLAS_CHECK(cublasLtMatmul(ctx.handle, &plan->desc, alpha_ptr, ptr.b, &plan->lay_b, ptr.a, &plan->lay_a,
                                     beta_ptr, ptr.out, &plan->lay_out, ptr.out, &plan->lay_out, &plan->algo,
                                     ctx.workspace.ptr, ctx.workspace.bytes, ctx.stream));
  }
  return true;
}

Shape product_shape(const Shape& batch, int64_t m, int64_t n) {
  Shape s = batch;
  s.push_back(m);
  s.push_back(n);
  return s;
}

}  // namespace

Tensor gemm(const Tensor& a_in, const Tensor& b_in, const Tensor& bias_in, const Shape& batch) {
  const int64_t m = a_in.size(-2), k = a_in.size(-1), n = b_in.size(-1);
  const Context ctx = context_for(a_in);  // first: it makes a's device current for the allocations
  const Shape out_shape = product_shape(batch, m, n);
  Tensor out = empty(out_shape, a_in.dtype(), a_in.device());
  if (out.numel() == 0) return out;
  const Tensor bias = bias_in.defined() ? bias_in.contiguous() : bias_in;
  if (k == 0) {  // empty sums: zeros, or the bias in every row
    if (bias.defined())
      out.copy_(bias.expand(out_shape));
    else
      out.zero_();
    return out;
  }
  // Fix the layout before expanding, so broadcast batches are never materialised.
  const Tensor a = lt_readable(a_in).expand(product_shape(batch, m, k));
  const Tensor b = lt_readable(b_in).expand(product_shape(batch, k, n));
  const Product prod = plan_product(a, b, out);
  cublasStatus_t why = CUBLAS_STATUS_SUCCESS;
  // The bias epilogue wants a 16-byte aligned bias; otherwise (or without an algorithm for it) the
  // bias is written into out first and accumulated onto with beta = 1.
  if (bias.defined() && aligned16(bias) && launch_all(ctx, prod, Epilogue::bias, a, b, out, bias, Tensor(), 0.0, &why))
    return out;
  double beta = 0.0;
  if (bias.defined()) {
    out.copy_(bias.expand(out_shape));
    beta = 1.0;
  }
  if (launch_all(ctx, prod, Epilogue::none, a, b, out, Tensor(), Tensor(), beta, &why)) return out;
  // No algorithm for these pointers and leading dims (e.g. a view starting at an odd element):
  // fresh packed copies start on the allocator's 512-byte boundaries.
  const Tensor ac = a_in.clone().expand(product_shape(batch, m, k));
  const Tensor bc = b_in.clone().expand(product_shape(batch, k, n));
  KILN_CHECK(launch_all(ctx, plan_product(ac, bc, out), Epilogue::none, ac, bc, out, Tensor(), Tensor(), beta, &why),
             "matmul: cuBLASLt has no algorithm for ", a_in.shape(), " (strides ", a_in.strides(), ") @ ",
             b_in.shape(), " (strides ", b_in.strides(), ") in ", out.dtype(), " on ", out.device(),
             ", not even for packed copies: ", cublasLtGetStatusName(why));
  return out;
}

std::optional<ops::LinearGelu> gemm_gelu(const Tensor& a_in, const Tensor& b_in, const Tensor& bias_in,
                                  const Shape& batch) {
  const int64_t m = a_in.size(-2), k = a_in.size(-1), n = b_in.size(-1);
  // The aux output's ld (= N) and batch stride must be multiples of 8 elements.
  if (n % 8 != 0 || k == 0) return std::nullopt;
  const Context ctx = context_for(a_in);
  const Tensor bias = bias_in.defined() ? bias_in.contiguous() : bias_in;
  if (bias.defined() && !aligned16(bias)) return std::nullopt;
  const Shape out_shape = product_shape(batch, m, n);
  ops::LinearGelu r{empty(out_shape, a_in.dtype(), a_in.device()), empty(out_shape, a_in.dtype(), a_in.device())};
  if (r.out.numel() == 0) return r;
  const Tensor a = lt_readable(a_in).expand(product_shape(batch, m, k));
  const Tensor b = lt_readable(b_in).expand(product_shape(batch, k, n));
  const Product prod = plan_product(a, b, r.out);
  const Epilogue e = bias.defined() ? Epilogue::gelu_aux_bias : Epilogue::gelu_aux;
  if (!launch_all(ctx, prod, e, a, b, r.out, bias, r.pre_gelu, 0.0, nullptr)) return std::nullopt;
  return r;
}

}  // namespace kiln::cuda
