// cuDNN fused attention, forward and backward (attention_cudnn.h). Each call describes its problem
// (shape, strides, dtype, mask), finds or builds the plan for it (Note [cuDNN SDPA plans]) and runs
// it on the device's current stream with scratch tensors from the caching allocator.
#include <kiln/core/cuda/kernels/attention_cudnn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

#include <kiln/core/cuda/kernels/attention_cudnn_graph.cuh>
#include <kiln/core/cuda/kernels/flash_attention_layout.h>
#include <kiln/core/cuda/plan/cudnn_sdpa_workspace.h>
#include <kiln/core/cuda/runtime/check.cuh>
#include <kiln/core/cuda/runtime/cudnn.cuh>
#include <kiln/core/cuda/runtime/cudnn_runtime_libs.h>
#include <kiln/core/factory.h>

namespace kiln::cuda {

namespace {

// Note [cuDNN SDPA plans]
// A plan is built once per key: pass, cuDNN handle, dtype, B, H, T, D, mask and the strides of
// every tensor the graph binds. The handle stands for (thread, device): Kiln leases one handle per
// thread and device (cudnn.cuh), so a plan is only ever run with the handle it was finalized with
// and never from two threads at once. Building: the op graph (Note [cuDNN SDPA graphs]), the
// heuristics' engine configs in their order, the first whose plan finalizes wins. cuDNN compiles
// the SDPA engines with NVRTC when the plan is finalized (seconds, once per key). A key with no
// engine is cached too, with the reason, so a fall-back caller pays for the attempt once.

enum class Pass : int64_t { forward = 0, backward = 1 };

using PlanKey = std::array<int64_t, 41>;

struct Plan {
  SdpaGraph graph;           // the descriptors the plan was made from, kept alive with it
  BackendDescriptor config;  // the engine config that finalized
  std::vector<BackendDescriptor> config_parts;  // what a hand-made (knob) config refers to
  BackendDescriptor plan;    // undefined when no engine could be built
  int64_t engine = -1;
  std::string label;         // sdpa_engine_label of the config
  int64_t workspace = 0;     // bytes
  std::string failure;       // why there is no plan
};

struct PlanCache {
  std::mutex mutex;
  std::map<PlanKey, std::shared_ptr<const Plan>> plans;
};
PlanCache& plan_cache() {
  static PlanCache* c = new PlanCache;  // leaked: plans are used until exit
  return *c;
}

std::atomic<int64_t> g_forward_count{0}, g_backward_count{0};
thread_local std::string t_last_label[2];  // the config this thread's last forward / backward ran

// Note [cuDNN dQ accumulator] (core/cuda/plan/cudnn_sdpa_workspace.h), decided once per process.
bool zero_dq_accum() {
  static const bool zero = [] {
    const char* env = std::getenv("KILN_CUDNN_ZERO_DQ_ACCUM");
    return sdpa_dq_accum_needs_zero(static_cast<int64_t>(cudnnGetVersion()), env ? env : "");
  }();
  return zero;
}

// Note [cuDNN SDPA engine choice]
// By default a plan takes the first of mode A's configs that finalizes, as cudnn-frontend's
// HEURISTICS_CHOICE policy does. Which config is fastest on a given GPU is measured, not assumed:
// the candidates are every config modes A, B and FALLBACK offer (sdpa_engine_candidates), and
// `bench_cuda --sweep --only attention` times each forward and backward apart. A choice is an index
// into that list per pass, from KILN_CUDNN_SDPA_ENGINE ("fwd=N,bwd=M", either may be left out;
// read once) or set_attention_cudnn_engine_choice; -1 = the default. It is part of the plan key.
// An index the case does not have, or a config that does not finalize, is the plan's failure
// (an error under CudnnMiss::fail, Kiln's kernels under fall_back), naming the candidates.

// KILN_CUDNN_SDPA_ENGINE read whole: "fwd=N", "bwd=M" or both, comma-separated, each at most once;
// anything else is an error naming the value. {forward, backward}, -1 where absent.
std::array<int64_t, 2> parse_choices(const std::string& text) {
  std::array<int64_t, 2> out = {-1, -1};
  std::array<bool, 2> seen = {false, false};
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(at, end - at);
    const int pass = item.rfind("fwd=", 0) == 0 ? 0 : item.rfind("bwd=", 0) == 0 ? 1 : -1;
    KILN_CHECK_VALUE(pass >= 0, "KILN_CUDNN_SDPA_ENGINE=", text, ": expected fwd=N and/or bwd=M separated by a comma, "
                     "got '", item, "'");
    KILN_CHECK_VALUE(!seen[pass], "KILN_CUDNN_SDPA_ENGINE=", text, ": ", pass ? "bwd" : "fwd", " given twice");
    const std::string value = item.substr(4);
    char* stop = nullptr;
    const long n = std::strtol(value.c_str(), &stop, 10);
    KILN_CHECK_VALUE(!value.empty() && *stop == '\0' && n >= -1, "KILN_CUDNN_SDPA_ENGINE=", text, ": ",
                     pass ? "bwd" : "fwd", " takes a candidate index >= 0 (or -1 for the default), got '", value, "'");
    out[pass] = n;
    seen[pass] = true;
    at = end + 1;
  }
  return out;
}

std::atomic<int64_t>& engine_choice(Pass pass) {
  static std::array<std::atomic<int64_t>, 2> choice = [] {
    const char* env = std::getenv("KILN_CUDNN_SDPA_ENGINE");
    const std::array<int64_t, 2> c = parse_choices(env ? env : "");
    return std::array<std::atomic<int64_t>, 2>{c[0], c[1]};
  }();
  return choice[static_cast<int>(pass)];
}

// q, k, v, out and dout as cuDNN reads them: a copy of a view with an expanded (stride-0) dimension
// or an unaligned one (Note [Attention layouts], core/cuda/plan/attention_layout.h).
Tensor cudnn_readable(const Tensor& t) { return flash::kernel_readable(t, flash::AttentionReader::cudnn); }

// Note [cuDNN gradient layout]
// A gradient cuDNN writes takes its input's layout where that input is contiguous (B, H, T, D), as
// PyTorch's empty_like does, and is (B, H, T, D) stored as (B, T, H, D) otherwise (GPT's q, k, v:
// views of the qkv projection, whose gradient goes back through that layout). A contiguous leaf
// then adds its gradient without a transposing read: with (B, T, H, D) gradients, bench_cuda's
// fwd+bwd at B8 H16 T2048 D128 took 1.72 ms on an H200 where the two kernels took 1.20.
Tensor grad_like(const Tensor& x) {
  if (x.is_contiguous()) return empty(x.shape(), x.dtype(), x.device());
  return flash::empty_heads(x.size(0), x.size(1), x.size(2), x.size(3), x.dtype(), x.device());
}

// t's strides in (B, H, T, D) order; a dimension of size 1 gets a stride past every other one, so
// equal problems get equal keys whatever their unit strides are.
SdpaStrides strides_of(const Tensor& t) {
  int64_t past = 1;
  for (int64_t d = 0; d < 4; ++d)
    if (t.size(d) > 1) past = std::max(past, t.stride(d) * t.size(d));
  SdpaStrides s{};
  for (int64_t d = 0; d < 4; ++d) s[d] = t.size(d) > 1 ? t.stride(d) : past;
  s[3] = 1;
  for (int64_t d = 0; d < 3; ++d)
    KILN_ASSERT(s[d] > 0, "attention_cudnn: stride ", s[d], " in dimension ", d, " of ", t.shape(),
                " (cudnn_readable copies expanded views)");
  return s;
}

std::string shape_text(const Shape& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

cudnnDataType_t io_type(DType dt) { return dt == DType::f16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16; }

PlanKey key_of(Pass pass, cudnnHandle_t handle, DType dtype, const SdpaGraphSpec& s) {
  PlanKey k{};
  k[0] = static_cast<int64_t>(pass);
  k[1] = static_cast<int64_t>(reinterpret_cast<intptr_t>(handle));
  k[2] = static_cast<int64_t>(dtype);
  k[3] = s.b, k[4] = s.h, k[5] = s.t, k[6] = s.d, k[7] = s.causal;
  const SdpaStrides* all[8] = {&s.q, &s.k, &s.v, &s.o, &s.dout, &s.dq, &s.dk, &s.dv};
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) k[8 + 4 * i + j] = (*all[i])[j];
  k[40] = engine_choice(pass).load(std::memory_order_relaxed);
  return k;
}

std::string describe(const SdpaGraphSpec& s, Pass pass) {
  return std::string(pass == Pass::forward ? "forward" : "backward") + " of " +
         (s.io == CUDNN_DATA_HALF ? "f16" : "bf16") + " (B " + std::to_string(s.b) + ", H " + std::to_string(s.h) +
         ", T " + std::to_string(s.t) + ", D " + std::to_string(s.d) + ")" + (s.causal ? " causal" : "");
}

SdpaGraphSpec forward_spec(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, bool causal) {
  SdpaGraphSpec spec;
  spec.b = q.size(0), spec.h = q.size(1), spec.t = q.size(2), spec.d = q.size(3);
  spec.io = io_type(q.dtype()), spec.causal = causal;
  spec.q = strides_of(q), spec.k = strides_of(k), spec.v = strides_of(v), spec.o = strides_of(out);
  return spec;
}

SdpaGraphSpec backward_spec(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                            const FlashAttentionGrads& g, bool causal) {
  SdpaGraphSpec spec = forward_spec(q, k, v, out, causal);
  spec.dout = strides_of(dout), spec.dq = strides_of(g.dq), spec.dk = strides_of(g.dk), spec.dv = strides_of(g.dv);
  return spec;
}

std::shared_ptr<const Plan> build_plan(Pass pass, const SdpaGraphSpec& spec, cudnnHandle_t handle, int64_t choice) {
  auto p = std::make_shared<Plan>();
  const std::string& libs = cudnn_runtime_compiler_problem();  // also loads libnvrtc for cuDNN
  try {
    p->graph = pass == Pass::forward ? build_sdpa_forward_graph(spec, handle) : build_sdpa_backward_graph(spec, handle);
    std::vector<SdpaEngineConfig> configs;
    if (choice < 0) {
      configs = sdpa_engine_configs(p->graph, nullptr);
    } else {  // Note [cuDNN SDPA engine choice]
      // The knob variants follow the heuristics' configs: built only for an index past those.
      std::vector<SdpaEngineConfig> all = sdpa_engine_candidates(p->graph, nullptr, /*with_knobs=*/false);
      if (choice >= static_cast<int64_t>(all.size())) all = sdpa_engine_candidates(p->graph, nullptr);
      if (choice >= static_cast<int64_t>(all.size())) {
        std::ostringstream os;
        os << describe(spec, pass) << ": the engine choice (KILN_CUDNN_SDPA_ENGINE or "
           << "set_attention_cudnn_engine_choice) asks for candidate " << choice << ", cuDNN offers " << all.size()
           << ":";
        for (size_t i = 0; i < all.size(); ++i) os << " " << i << ": " << sdpa_engine_label(all[i]) << ";";
        p->failure = os.str();
        return p;
      }
      configs.push_back(std::move(all[static_cast<size_t>(choice)]));
    }
    std::string tried;
    bool prerequisite_missing = false;
    for (SdpaEngineConfig& c : configs) {
      BackendDescriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan.set_handle(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, handle).set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, c.config);
      const cudnnStatus_t status = plan.try_finalize();
      if (status == CUDNN_STATUS_SUCCESS) {
        p->workspace = plan.get_int64(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE);
        p->plan = std::move(plan);
        p->config = std::move(c.config);
        p->config_parts = std::move(c.parts);
        p->engine = c.engine;
        p->label = sdpa_engine_label(c);
        return p;
      }
      prerequisite_missing |= status == CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING;
      tried += " engine " + std::to_string(c.engine) + ": " + cudnnGetErrorString(status) + " (" + cudnn_last_error() + ");";
    }
    if (configs.empty())
      p->failure = "cuDNN's heuristics offered no engine" + (libs.empty() ? std::string() : " (" + libs + ")");
    else if (prerequisite_missing)
      p->failure = cudnn_runtime_prerequisite_message() + "; tried" + tried;
    else if (choice >= 0)
      p->failure = "the chosen engine config (candidate " + std::to_string(choice) + ") could not be built:" + tried;
    else
      p->failure = "none of the " + std::to_string(configs.size()) + " engines cuDNN offered could be built:" + tried;
  } catch (const Error& e) {
    p->failure = std::string("building the cuDNN graph failed: ") + e.what();
  }
  p->failure = describe(spec, pass) + ": " + p->failure;
  return p;
}

std::shared_ptr<const Plan> plan_for(Pass pass, DType dtype, const SdpaGraphSpec& spec, cudnnHandle_t handle) {
  const PlanKey key = key_of(pass, handle, dtype, spec);
  PlanCache& cache = plan_cache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.plans.find(key);
    if (it != cache.plans.end()) return it->second;
  }
  // Built outside the lock (NVRTC takes seconds); only this thread uses this handle, so no other
  // thread builds the same key meanwhile.
  std::shared_ptr<const Plan> plan = build_plan(pass, spec, handle, key[40]);
  std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.plans.emplace(key, std::move(plan)).first->second;
}

// Runs `plan` with the tensors bound by uid; scratch of the plan's workspace size comes from the
// caching allocator on `device` and goes back once the stream has used it.
void execute(cudnnHandle_t handle, const Plan& plan, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs,
             Device device) {
  KILN_ASSERT(uids.size() == ptrs.size(), "cuDNN attention: ", uids.size(), " uids for ", ptrs.size(), " pointers");
  Tensor workspace = plan.workspace > 0 ? empty({plan.workspace}, DType::u8, device) : Tensor();
  void* ws = workspace.defined() ? workspace.data_ptr() : nullptr;
  BackendDescriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data())
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()), ptrs.data())
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws)
      .finalize();
  KILN_CUDNN_BACKEND_CHECK(cudnnBackendExecute(handle, plan.plan.get(), pack.get()));
}

// The check every entry point starts with: nullopt-worthy reasons become an error under `fail`.
bool usable(const std::string& why, CudnnMiss miss, const char* op) {
  if (why.empty()) return true;
  KILN_CHECK(miss == CudnnMiss::fall_back, op, ": cuDNN's fused attention cannot run this case: ", why);
  return false;
}

}  // namespace

std::string attention_cudnn_unsupported(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (!q.defined() || !k.defined() || !v.defined()) return "q, k and v must be defined";
  if (q.dim() != 4 || k.shape() != q.shape() || v.shape() != q.shape())
    return "q, k, v must share one (B, H, T, D) shape, got " + shape_text(q.shape()) + ", " +
           shape_text(k.shape()) + ", " + shape_text(v.shape());
  if (!q.device().is_cuda() || k.device() != q.device() || v.device() != q.device())
    return "q, k, v must be on one CUDA device";
  if ((q.dtype() != DType::bf16 && q.dtype() != DType::f16) || k.dtype() != q.dtype() || v.dtype() != q.dtype())
    return std::string("q, k, v must all be bf16 or all f16, got ") + dtype_name(q.dtype()) + ", " +
           dtype_name(k.dtype()) + ", " + dtype_name(v.dtype());
  if (q.size(3) != 64 && q.size(3) != 128) return "head dim " + std::to_string(q.size(3)) + " (Kiln uses 64 or 128)";
  if (q.size(2) < 1) return "T = 0";
  if (cudnnGetVersion() < 90800)
    return "cuDNN " + std::to_string(cudnnGetVersion()) + " is older than 9.8 (90800), the oldest Kiln's graphs were tested with";
  int major = 0;
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, q.device().index));
  if (major < 8) return "compute capability " + std::to_string(major) + ".x (cuDNN's flash attention needs 8.0+)";
  return "";
}

std::optional<FlashAttentionForward> attention_cudnn_forward(const Tensor& q_in, const Tensor& k_in,
                                                             const Tensor& v_in, bool causal, double scale,
                                                             CudnnMiss miss) {
  if (!usable(attention_cudnn_unsupported(q_in, k_in, v_in), miss, "attention_cudnn_forward")) return std::nullopt;
  const int64_t b = q_in.size(0), h = q_in.size(1), t = q_in.size(2), d = q_in.size(3);
  const Device device = q_in.device();
  FlashAttentionForward r;
  r.out = flash::empty_heads(b, h, t, d, q_in.dtype(), device);  // (B, H, T, D) stored (B, T, H, D)
  r.lse = empty({b, h, t}, DType::f32, device);                    // = stats (B, H, T, 1)
  if (b * h == 0) return r;
  const Tensor q = cudnn_readable(q_in), k = cudnn_readable(k_in), v = cudnn_readable(v_in);

  cudnnHandle_t handle = cudnn_handle_for(q);  // on q's device, bound to its current stream
  const SdpaGraphSpec spec = forward_spec(q, k, v, r.out, causal);
  std::shared_ptr<const Plan> plan = plan_for(Pass::forward, q.dtype(), spec, handle);
  if (!usable(plan->failure, miss, "attention_cudnn_forward")) return std::nullopt;
  t_last_label[0] = plan->label;

  float scale_f = static_cast<float>(scale), neg_inf = -INFINITY;
  std::vector<int64_t> uids = {sdpa_uid::kQ, sdpa_uid::kK, sdpa_uid::kV, sdpa_uid::kO, sdpa_uid::kStats, sdpa_uid::kScale};
  std::vector<void*> ptrs = {q.data_ptr(), k.data_ptr(), v.data_ptr(), r.out.data_ptr(), r.lse.data_ptr(), &scale_f};
  if (causal) uids.push_back(sdpa_uid::kNegInf), ptrs.push_back(&neg_inf);
  execute(handle, *plan, uids, ptrs, device);
  g_forward_count.fetch_add(1, std::memory_order_relaxed);
  return r;
}

std::optional<FlashAttentionGrads> attention_cudnn_backward(const Tensor& dout_in, const Tensor& q_in,
                                                            const Tensor& k_in, const Tensor& v_in,
                                                            const Tensor& out_in, const Tensor& lse, bool causal,
                                                            double scale, bool need_dq, bool need_dkdv,
                                                            CudnnMiss miss) {
  if (!usable(attention_cudnn_unsupported(q_in, k_in, v_in), miss, "attention_cudnn_backward")) return std::nullopt;
  for (const Tensor* t : {&dout_in, &out_in})
    KILN_CHECK(t->defined() && t->shape() == q_in.shape() && t->dtype() == q_in.dtype() && t->device() == q_in.device(),
               "attention_cudnn_backward: dout and out must match q ", q_in.shape(), " ", q_in.dtype(), " on ",
               q_in.device());
  const int64_t b = q_in.size(0), h = q_in.size(1), t = q_in.size(2), d = q_in.size(3);
  const Device device = q_in.device();
  KILN_CHECK(lse.defined() && lse.shape() == Shape({b, h, t}) && lse.dtype() == DType::f32 && lse.is_contiguous() &&
                 lse.device() == device,
             "attention_cudnn_backward: lse must be the forward's contiguous f32 (", b, ", ", h, ", ", t, ") on ", device);
  FlashAttentionGrads r;
  if (!need_dq && !need_dkdv) return r;
  r.dq = grad_like(q_in);  // cuDNN writes all three
  r.dk = grad_like(k_in);
  r.dv = grad_like(v_in);
  if (b * h > 0) {
    const Tensor q = cudnn_readable(q_in), k = cudnn_readable(k_in), v = cudnn_readable(v_in);
    const Tensor out = cudnn_readable(out_in), dout = cudnn_readable(dout_in);
    cudnnHandle_t handle = cudnn_handle_for(q);
    const SdpaGraphSpec spec = backward_spec(q, k, v, out, dout, r, causal);
    std::shared_ptr<const Plan> plan = plan_for(Pass::backward, q.dtype(), spec, handle);
    if (!usable(plan->failure, miss, "attention_cudnn_backward")) return std::nullopt;
    t_last_label[1] = plan->label;

    Tensor softmax_sum = empty({b, h, t}, DType::f32, device);                           // (B, H, T, 1)
    // Note [cuDNN dQ accumulator]: zeroed only where cuDNN does not initialize it itself.
    Tensor dq_accum = zero_dq_accum() ? zeros({b, h, t, d}, TensorOptions(DType::f32).device(device))
                                      : empty({b, h, t, d}, DType::f32, device);
    float scale_f = static_cast<float>(scale), one = 1.f, neg_inf = -INFINITY;
    std::vector<int64_t> uids = {sdpa_uid::kQ,  sdpa_uid::kK,  sdpa_uid::kV,     sdpa_uid::kO,
                                 sdpa_uid::kDout, sdpa_uid::kDq, sdpa_uid::kDk, sdpa_uid::kDv,
                                 sdpa_uid::kStats, sdpa_uid::kSoftmaxSum, sdpa_uid::kDqAccum,
                                 sdpa_uid::kScale, sdpa_uid::kOne};
    std::vector<void*> ptrs = {q.data_ptr(),  k.data_ptr(),    v.data_ptr(),        out.data_ptr(),
                               dout.data_ptr(), r.dq.data_ptr(), r.dk.data_ptr(),   r.dv.data_ptr(),
                               lse.data_ptr(),  softmax_sum.data_ptr(), dq_accum.data_ptr(), &scale_f, &one};
    if (causal) uids.push_back(sdpa_uid::kNegInf), ptrs.push_back(&neg_inf);
    execute(handle, *plan, uids, ptrs, device);
    g_backward_count.fetch_add(1, std::memory_order_relaxed);
  }
  if (!need_dq) r.dq = Tensor();
  if (!need_dkdv) r.dk = r.dv = Tensor();
  return r;
}

void set_attention_cudnn_engine_choice(bool backward, int64_t index) {
  KILN_CHECK(index >= -1, "set_attention_cudnn_engine_choice: index ", index, " (a candidate >= 0, or -1)");
  engine_choice(backward ? Pass::backward : Pass::forward).store(index, std::memory_order_relaxed);
}

int64_t attention_cudnn_engine_choice(bool backward) {
  return engine_choice(backward ? Pass::backward : Pass::forward).load(std::memory_order_relaxed);
}

std::vector<std::string> attention_cudnn_engine_candidates(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                                           const Tensor& dout_in, bool causal, bool backward,
                                                           bool with_knobs) {
  const std::string why = attention_cudnn_unsupported(q_in, k_in, v_in);
  KILN_CHECK(why.empty(), "attention_cudnn_engine_candidates: ", why);
  const int64_t b = q_in.size(0), h = q_in.size(1), t = q_in.size(2), d = q_in.size(3);
  const Tensor q = cudnn_readable(q_in), k = cudnn_readable(k_in), v = cudnn_readable(v_in);
  const Tensor out = flash::empty_heads(b, h, t, d, q.dtype(), q.device());
  cudnnHandle_t handle = cudnn_handle_for(q);
  SdpaGraph graph;
  if (backward) {
    FlashAttentionGrads g;
    g.dq = grad_like(q_in), g.dk = grad_like(k_in), g.dv = grad_like(v_in);  // as the backward allocates them
    const Tensor dout = dout_in.defined() ? cudnn_readable(dout_in) : out;
    KILN_CHECK(dout.shape() == q.shape(), "attention_cudnn_engine_candidates: dout ", dout.shape(), " for q ", q.shape());
    graph = build_sdpa_backward_graph(backward_spec(q, k, v, out, dout, g, causal), handle);
  } else {
    graph = build_sdpa_forward_graph(forward_spec(q, k, v, out, causal), handle);
  }
  std::vector<std::string> labels;
  for (const SdpaEngineConfig& c : sdpa_engine_candidates(graph, nullptr, with_knobs))
    labels.push_back(sdpa_engine_label(c));
  return labels;
}

std::string attention_cudnn_last_engine(bool backward) { return t_last_label[backward ? 1 : 0]; }

int64_t attention_cudnn_forward_count() { return g_forward_count.load(std::memory_order_relaxed); }
int64_t attention_cudnn_backward_count() { return g_backward_count.load(std::memory_order_relaxed); }

}  // namespace kiln::cuda
