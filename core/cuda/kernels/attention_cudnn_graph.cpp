// cuDNN SDPA op graphs through the backend API (attention_cudnn_graph.cuh).
#include <kiln/core/cuda/kernels/attention_cudnn_graph.cuh>

#include <algorithm>
#include <sstream>
#include <utility>

namespace kiln::cuda {

// Note [cuDNN SDPA graphs]
// cuDNN has no "attention" call in its backend API: it matches a graph of plain ops against the
// patterns its fused flash-attention engines implement, and offers those engines only when the
// graph is exactly such a pattern (the node list below is the one NVIDIA's frontend emits). With
// S (B, H, T, T) the scores, all intermediate tensors virtual (never in memory) unless said:
//
// forward   S = Q Kᵀ · scale           (Kᵀ: K's descriptor with dims and strides 2 <-> 3 swapped)
//           causal: row = GEN_INDEX(S, axis 2), col = GEN_INDEX(S, axis 3),
//                   S = BINARY_SELECT(S, -inf, CMP_GE(row, col))
//           m = max_j S, E = exp(S - m), l = Σ_j E
//           stats = m + log l           (B, H, T, 1) f32, in memory: the log-sum-exp the backward
//                                       reads; without this output no engine matches
//           P = E / l                   in the inputs' type (bf16/f16); P in f32 matches nothing
//           O = P V
// backward  softmax_sum = Σ_d dO ∘ O    (B, H, T, 1) f32 in memory (scratch the caller provides)
//           P = exp(Q Kᵀ · scale - stats), causal mask as above
//           dV = Pᵀ dO                  (Pᵀ: a RESHAPE of P to transposed strides, in the inputs' type)
//           dS = P ∘ (dO Vᵀ - softmax_sum) · scale
//           dK = dSᵀ Q
//           dQ = IDENTITY(dS K)         through an f32 accumulator in memory, which the caller zeroes:
//                                       the engine adds into it from several blocks (atomics)
// The scalars (scale, -inf, 1) are by-value tensors: the variant pack holds host pointers to them.
// stats is the natural log-sum-exp of the scaled scores, the same quantity Kiln's flash kernels
// save as lse, so either backward can follow either forward.

SdpaStrides sdpa_strides_bhtd(int64_t b, int64_t h, int64_t t, int64_t d) {
  (void)b;
  return {h * t * d, t * d, d, 1};
}

SdpaStrides sdpa_strides_bthd(int64_t b, int64_t h, int64_t t, int64_t d) {
  (void)b;
  return {t * h * d, d, h * d, 1};
}

namespace {

std::vector<int64_t> as_vector(const SdpaStrides& s) { return {s[0], s[1], s[2], s[3]}; }
SdpaStrides transposed(const SdpaStrides& s) { return {s[0], s[1], s[3], s[2]}; }

constexpr cudnnDataType_t kF32 = CUDNN_DATA_FLOAT;

// Builds one op graph: owns every descriptor it makes; ops are wired by raw handles.
class GraphBuilder {
 public:
  explicit GraphBuilder(cudnnHandle_t handle) : handle_(handle) {}

  // A tensor in memory (a variant pack binds it by uid).
  cudnnBackendDescriptor_t tensor(int64_t uid, cudnnDataType_t dtype, std::vector<int64_t> dims,
                                  std::vector<int64_t> strides) {
    return make_tensor(uid, dtype, std::move(dims), std::move(strides), /*is_virtual=*/false, /*by_value=*/false);
  }
  // An intermediate cuDNN never writes to memory.
  cudnnBackendDescriptor_t virtual_tensor(cudnnDataType_t dtype, std::vector<int64_t> dims,
                                          std::vector<int64_t> strides) {
    return make_tensor(next_virtual_uid_++, dtype, std::move(dims), std::move(strides), true, false);
  }
  // An f32 scalar passed by value (a host pointer in the variant pack).
  cudnnBackendDescriptor_t scalar(int64_t uid) { return make_tensor(uid, kF32, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true); }

  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    BackendDescriptor desc(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    desc.set_dtype(CUDNN_ATTR_MATMUL_COMP_TYPE, kF32).finalize();
    BackendDescriptor op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, desc)
        .finalize();
    keep(std::move(desc));
    add_op(std::move(op));
  }

  // y = mode(x[, b][, t]); `axis` for GEN_INDEX; math in `precision`.
  void pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                 cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t t = nullptr, int64_t axis = -1,
                 cudnnDataType_t precision = kF32) {
    BackendDescriptor desc(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    desc.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
        .set_dtype(CUDNN_ATTR_POINTWISE_MATH_PREC, precision);
    if (axis >= 0) desc.set_int64(CUDNN_ATTR_POINTWISE_AXIS, axis);
    desc.finalize();
    BackendDescriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, desc).set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y).finalize();
    keep(std::move(desc));
    add_op(std::move(op));
  }

  void reduction(cudnnReduceTensorOp_t reduce, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    BackendDescriptor desc(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    desc.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce)
        .set_dtype(CUDNN_ATTR_REDUCTION_COMP_TYPE, kF32)
        .finalize();
    BackendDescriptor op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x)
        .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y)
        .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, desc)
        .finalize();
    keep(std::move(desc));
    add_op(std::move(op));
  }

  // y: x's elements under y's dims and strides (a transposed view, or a change of type).
  void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    BackendDescriptor op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x).set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y).finalize();
    add_op(std::move(op));
  }

  SdpaGraph finish() {
    SdpaGraph g;
    g.op_count = static_cast<int64_t>(ops_.size());
    g.graph = BackendDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    if (handle_) g.graph.set_handle(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, handle_);
    g.graph.set_descs(CUDNN_ATTR_OPERATIONGRAPH_OPS, ops_).finalize();
    g.parts = std::move(parts_);
    return g;
  }

 private:
  cudnnBackendDescriptor_t make_tensor(int64_t uid, cudnnDataType_t dtype, std::vector<int64_t> dims,
                                       std::vector<int64_t> strides, bool is_virtual, bool by_value) {
    BackendDescriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    t.set_dtype(CUDNN_ATTR_TENSOR_DATA_TYPE, dtype)
        .set_int64s(CUDNN_ATTR_TENSOR_DIMENSIONS, dims)
        .set_int64s(CUDNN_ATTR_TENSOR_STRIDES, strides)
        .set_int64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
        .set_int64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16)
        .set_bool(CUDNN_ATTR_TENSOR_IS_VIRTUAL, is_virtual);
    if (by_value) t.set_bool(CUDNN_ATTR_TENSOR_IS_BY_VALUE, true);
    t.finalize();
    return keep(std::move(t));
  }
  cudnnBackendDescriptor_t keep(BackendDescriptor d) {
    parts_.push_back(std::move(d));
    return parts_.back().get();
  }
  void add_op(BackendDescriptor op) { ops_.push_back(keep(std::move(op))); }

  cudnnHandle_t handle_;
  std::vector<BackendDescriptor> parts_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_virtual_uid_ = 1000;  // above every sdpa_uid
};

// The shapes every graph uses: scores (B, H, T, T) and row statistics (B, H, T, 1).
struct Dims {
  std::vector<int64_t> s, s_strides, s_t_strides, row, row_strides, bhtd;
};
Dims dims_of(const SdpaGraphSpec& p) {
  const int64_t b = p.b, h = p.h, t = p.t, d = p.d;
  return {{b, h, t, t}, {h * t * t, t * t, t, 1}, {h * t * t, t * t, 1, t}, {b, h, t, 1}, {h * t, t, 1, 1},
          {b, h, t, d}};
}

// Causal mask on scores s: row i keeps the columns j <= i, the rest become -inf.
cudnnBackendDescriptor_t causal_mask(GraphBuilder& g, const Dims& x, cudnnBackendDescriptor_t s) {
  cudnnBackendDescriptor_t row = g.virtual_tensor(CUDNN_DATA_INT32, x.s, x.s_strides);
  cudnnBackendDescriptor_t col = g.virtual_tensor(CUDNN_DATA_INT32, x.s, x.s_strides);
  cudnnBackendDescriptor_t keep = g.virtual_tensor(CUDNN_DATA_BOOLEAN, x.s, x.s_strides);
  cudnnBackendDescriptor_t out = g.virtual_tensor(kF32, x.s, x.s_strides);
  cudnnBackendDescriptor_t neg_inf = g.scalar(sdpa_uid::kNegInf);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, row, nullptr, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, col, nullptr, 3);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, keep, nullptr, -1, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, neg_inf, out, keep);  // keep ? s : -inf
  return out;
}

// The descriptors array attribute `name` of `owner` holds, at most `capacity` (< 0: as many as it
// says it holds), into descriptors of `type` made here, as the backend API fills them. `out` keeps
// those it returned; cuDNN's status comes back.
cudnnStatus_t get_descriptors(cudnnBackendDescriptor_t owner, cudnnBackendAttributeName_t name,
                              cudnnBackendDescriptorType_t type, int64_t capacity, std::vector<BackendDescriptor>& out) {
  out.clear();
  if (capacity < 0) {
    const cudnnStatus_t status =
        cudnnBackendGetAttribute(owner, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &capacity, nullptr);
    if (status != CUDNN_STATUS_SUCCESS) return status;
  }
  if (capacity <= 0) return CUDNN_STATUS_SUCCESS;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < capacity; ++i) {
    out.emplace_back(type);
    raw.push_back(out.back().get());
  }
  int64_t returned = 0;
  const cudnnStatus_t status =
      cudnnBackendGetAttribute(owner, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, capacity, &returned, raw.data());
  out.erase(out.begin() + (status == CUDNN_STATUS_SUCCESS ? std::clamp<int64_t>(returned, 0, capacity) : 0), out.end());
  return status;
}

// The (knob type, value) pairs an engine config sets, sorted by type.
std::vector<std::pair<int64_t, int64_t>> knob_choices(cudnnBackendDescriptor_t config) {
  std::vector<BackendDescriptor> choices;
  if (get_descriptors(config, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, -1, choices) !=
      CUDNN_STATUS_SUCCESS)
    return {};
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const BackendDescriptor& choice : choices) {
    cudnnBackendKnobType_t type{};
    int64_t value = 0, n = 0;
    if (cudnnBackendGetAttribute(choice.get(), CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &n, &type) !=
            CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(choice.get(), CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &n, &value) !=
            CUDNN_STATUS_SUCCESS)
      continue;
    out.emplace_back(static_cast<int64_t>(type), value);
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct KnobRange {
  cudnnBackendKnobType_t type{};
  int64_t min = 0, max = -1, stride = 1;
};

BackendDescriptor engine_of(const SdpaGraph& graph, int64_t id) {
  BackendDescriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  engine.set_desc(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph.graph).set_int64(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, id).finalize();
  return engine;
}

// The knobs engine `id` exposes for `graph`, with the values each takes.
std::vector<KnobRange> knob_ranges(const SdpaGraph& graph, int64_t id) {
  BackendDescriptor engine = engine_of(graph, id);
  std::vector<BackendDescriptor> infos;
  if (get_descriptors(engine.get(), CUDNN_ATTR_ENGINE_KNOB_INFO, CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR,
                      CUDNN_KNOB_TYPE_COUNTS, infos) != CUDNN_STATUS_SUCCESS)
    return {};
  std::vector<KnobRange> out;
  for (const BackendDescriptor& info : infos) {
    KnobRange r;
    int64_t got = 0;
    if (cudnnBackendGetAttribute(info.get(), CUDNN_ATTR_KNOB_INFO_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &got, &r.type) !=
            CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(info.get(), CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE, CUDNN_TYPE_INT64, 1, &got, &r.min) !=
            CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(info.get(), CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE, CUDNN_TYPE_INT64, 1, &got, &r.max) !=
            CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(info.get(), CUDNN_ATTR_KNOB_INFO_STRIDE, CUDNN_TYPE_INT64, 1, &got, &r.stride) !=
            CUDNN_STATUS_SUCCESS)
      continue;
    if (r.max - r.min <= 256) out.push_back(r);  // a range, not a byte count
  }
  return out;
}

// Engine `id` with one knob set, the rest at the engine's defaults.
SdpaEngineConfig config_with_knob(const SdpaGraph& graph, int64_t id, cudnnBackendKnobType_t type, int64_t value) {
  SdpaEngineConfig c;
  c.engine = id;
  c.mode = "knob";
  c.knobs = {{static_cast<int64_t>(type), value}};
  BackendDescriptor engine = engine_of(graph, id);
  BackendDescriptor knob(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
  knob.set(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &type)
      .set(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &value)
      .finalize();
  BackendDescriptor config(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  config.set_desc(CUDNN_ATTR_ENGINECFG_ENGINE, engine).set_descs(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, {knob.get()});
  // A value the engine rejects for this graph fails here or when the plan is built: either way the
  // candidate is reported as failed, not dropped, so the list's indices stay the same.
  if (config.try_finalize() == CUDNN_STATUS_SUCCESS) c.workspace = config.get_int64(CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE);
  c.parts.push_back(std::move(engine));
  c.parts.push_back(std::move(knob));
  c.config = std::move(config);
  return c;
}

}  // namespace

SdpaGraph build_sdpa_forward_graph(const SdpaGraphSpec& p, cudnnHandle_t handle) {
  GraphBuilder g(handle);
  const Dims x = dims_of(p);
  cudnnBackendDescriptor_t q = g.tensor(sdpa_uid::kQ, p.io, x.bhtd, as_vector(p.q));
  cudnnBackendDescriptor_t kt = g.tensor(sdpa_uid::kK, p.io, {p.b, p.h, p.d, p.t}, as_vector(transposed(p.k)));
  cudnnBackendDescriptor_t v = g.tensor(sdpa_uid::kV, p.io, x.bhtd, as_vector(p.v));
  cudnnBackendDescriptor_t o = g.tensor(sdpa_uid::kO, p.io, x.bhtd, as_vector(p.o));
  cudnnBackendDescriptor_t scale = g.scalar(sdpa_uid::kScale);

  cudnnBackendDescriptor_t qk = g.virtual_tensor(kF32, x.s, x.s_strides);
  cudnnBackendDescriptor_t s = g.virtual_tensor(kF32, x.s, x.s_strides);
  g.matmul(q, kt, qk);
  g.pointwise(CUDNN_POINTWISE_MUL, qk, scale, s);
  if (p.causal) s = causal_mask(g, x, s);

  cudnnBackendDescriptor_t max = g.virtual_tensor(kF32, x.row, x.row_strides);
  cudnnBackendDescriptor_t centered = g.virtual_tensor(kF32, x.s, x.s_strides);
  cudnnBackendDescriptor_t e = g.virtual_tensor(kF32, x.s, x.s_strides);
  cudnnBackendDescriptor_t sum = g.virtual_tensor(kF32, x.row, x.row_strides);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, s, max);
  g.pointwise(CUDNN_POINTWISE_SUB, s, max, centered);
  g.pointwise(CUDNN_POINTWISE_EXP, centered, nullptr, e);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  if (p.with_stats) {
    cudnnBackendDescriptor_t log_sum = g.virtual_tensor(kF32, x.row, x.row_strides);
    cudnnBackendDescriptor_t stats = g.tensor(sdpa_uid::kStats, kF32, x.row, x.row_strides);
    g.pointwise(CUDNN_POINTWISE_LOG, sum, nullptr, log_sum);
    g.pointwise(CUDNN_POINTWISE_ADD, max, log_sum, stats);
  }
  cudnnBackendDescriptor_t probs = g.virtual_tensor(p.probs_in_f32 ? kF32 : p.io, x.s, x.s_strides);
  g.pointwise(CUDNN_POINTWISE_DIV, e, sum, probs);
  g.matmul(probs, v, o);
  return g.finish();
}

SdpaGraph build_sdpa_backward_graph(const SdpaGraphSpec& p, cudnnHandle_t handle) {
  GraphBuilder g(handle);
  const Dims x = dims_of(p);
  cudnnBackendDescriptor_t q = g.tensor(sdpa_uid::kQ, p.io, x.bhtd, as_vector(p.q));
  cudnnBackendDescriptor_t kt = g.tensor(sdpa_uid::kK, p.io, {p.b, p.h, p.d, p.t}, as_vector(transposed(p.k)));
  cudnnBackendDescriptor_t vt = g.tensor(sdpa_uid::kV, p.io, {p.b, p.h, p.d, p.t}, as_vector(transposed(p.v)));
  cudnnBackendDescriptor_t o = g.tensor(sdpa_uid::kO, p.io, x.bhtd, as_vector(p.o));
  cudnnBackendDescriptor_t dout = g.tensor(sdpa_uid::kDout, p.io, x.bhtd, as_vector(p.dout));
  cudnnBackendDescriptor_t dq = g.tensor(sdpa_uid::kDq, p.io, x.bhtd, as_vector(p.dq));
  cudnnBackendDescriptor_t dk = g.tensor(sdpa_uid::kDk, p.io, x.bhtd, as_vector(p.dk));
  cudnnBackendDescriptor_t dv = g.tensor(sdpa_uid::kDv, p.io, x.bhtd, as_vector(p.dv));
  cudnnBackendDescriptor_t stats = g.tensor(sdpa_uid::kStats, kF32, x.row, x.row_strides);
  cudnnBackendDescriptor_t scale = g.scalar(sdpa_uid::kScale);
  cudnnBackendDescriptor_t one = g.scalar(sdpa_uid::kOne);
  const std::vector<int64_t> bhtd_strides = as_vector(sdpa_strides_bhtd(p.b, p.h, p.t, p.d));

  // softmax_sum = Σ_d dO ∘ O, written to memory for the engine's second pass.
  cudnnBackendDescriptor_t dout_o = g.virtual_tensor(kF32, x.bhtd, bhtd_strides);
  cudnnBackendDescriptor_t row_sum = g.virtual_tensor(kF32, x.row, x.row_strides);
  cudnnBackendDescriptor_t softmax_sum = g.tensor(sdpa_uid::kSoftmaxSum, kF32, x.row, x.row_strides);
  g.pointwise(CUDNN_POINTWISE_MUL, dout, o, dout_o);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, dout_o, row_sum);
  g.pointwise(CUDNN_POINTWISE_MUL, row_sum, one, softmax_sum);

  // P = exp(Q Kᵀ · scale - stats), masked.
  cudnnBackendDescriptor_t qk = g.virtual_tensor(kF32, x.s, x.s_strides);
  cudnnBackendDescriptor_t s = g.virtual_tensor(kF32, x.s, x.s_strides);
  cudnnBackendDescriptor_t s_centered = g.virtual_tensor(kF32, x.s, x.s_strides);
  g.matmul(q, kt, qk);
  g.pointwise(CUDNN_POINTWISE_MUL, qk, scale, s);
  g.pointwise(CUDNN_POINTWISE_SUB, s, stats, s_centered);
  if (p.causal) s_centered = causal_mask(g, x, s_centered);
  cudnnBackendDescriptor_t probs = g.virtual_tensor(kF32, x.s, x.s_strides);
  g.pointwise(CUDNN_POINTWISE_EXP, s_centered, nullptr, probs);

  // dV = Pᵀ dO.
  cudnnBackendDescriptor_t probs_t = g.virtual_tensor(p.io, x.s, x.s_t_strides);
  g.reshape(probs, probs_t);
  g.matmul(probs_t, dout, dv);

  // dS = P ∘ (dO Vᵀ - softmax_sum) · scale.
  cudnnBackendDescriptor_t dp = g.virtual_tensor(kF32, x.s, x.s_strides);
  cudnnBackendDescriptor_t dp_centered = g.virtual_tensor(kF32, x.s, x.s_strides);
  cudnnBackendDescriptor_t dp_probs = g.virtual_tensor(kF32, x.s, x.s_strides);
  cudnnBackendDescriptor_t ds = g.virtual_tensor(kF32, x.s, x.s_strides);
  g.matmul(dout, vt, dp);
  g.pointwise(CUDNN_POINTWISE_SUB, dp, softmax_sum, dp_centered);
  g.pointwise(CUDNN_POINTWISE_MUL, dp_centered, probs, dp_probs);
  g.pointwise(CUDNN_POINTWISE_MUL, dp_probs, scale, ds);

  // dK = dSᵀ Q.
  cudnnBackendDescriptor_t ds_t = g.virtual_tensor(p.io, x.s, x.s_t_strides);
  g.reshape(ds, ds_t);
  g.matmul(ds_t, q, dk);

  // dQ = dS K, accumulated in f32, then converted.
  cudnnBackendDescriptor_t k = g.virtual_tensor(p.io, x.bhtd, as_vector(p.k));
  cudnnBackendDescriptor_t dq_accum = g.tensor(sdpa_uid::kDqAccum, kF32, x.bhtd, bhtd_strides);
  g.reshape(kt, k);
  g.matmul(ds, k, dq_accum);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, dq_accum, nullptr, dq);
  return g.finish();
}

std::string sdpa_engine_label(const SdpaEngineConfig& c) {
  std::ostringstream os;
  os << "engine " << c.engine << " (mode " << c.mode << ", ";
  if (c.workspace >= (int64_t{1} << 20))
    os << (c.workspace >> 20) << " MiB";
  else
    os << c.workspace << " B";
  os << " workspace";
  if (!c.knobs.empty()) os << ", knobs";
  for (const auto& [type, value] : c.knobs) os << " " << type << "=" << value;
  os << ")";
  return os.str();
}

std::vector<SdpaEngineConfig> sdpa_engine_configs(const SdpaGraph& graph, cudnnBackendDescriptor_t device_prop,
                                                  cudnnBackendHeurMode_t mode) {
  BackendDescriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph.graph)
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
#if CUDNN_VERSION >= 90800
  if (device_prop) heur.set_desc(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, device_prop);
#else
  KILN_CHECK(!device_prop, "deviceless heuristics need cuDNN 9.8 or newer, built with ", CUDNN_VERSION);
#endif
  heur.finalize();

  std::vector<BackendDescriptor> configs;
  KILN_CUDNN_BACKEND_CHECK(
      get_descriptors(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, -1, configs));

  std::vector<SdpaEngineConfig> out;
  for (size_t i = 0; i < configs.size(); ++i) {
    SdpaEngineConfig c;
    BackendDescriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnnBackendDescriptor_t engine_raw = engine.get();
    int64_t n = 0;
    KILN_CUDNN_BACKEND_CHECK(cudnnBackendGetAttribute(configs[i].get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine_raw));
    c.engine = engine.get_int64(CUDNN_ATTR_ENGINE_GLOBAL_INDEX);
    c.workspace = configs[i].get_int64(CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE);
    cudnnBackendNumericalNote_t numerical[32];
    cudnnBackendBehaviorNote_t behavior[32];
    int64_t n_numerical = 0, n_behavior = 0;
    if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 32,
                                 &n_numerical, numerical) != CUDNN_STATUS_SUCCESS)
      n_numerical = 0;
    if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, 32,
                                 &n_behavior, behavior) != CUDNN_STATUS_SUCCESS)
      n_behavior = 0;
    for (int64_t j = 0; j < n_numerical && j < 32; ++j)
      c.nondeterministic |= numerical[j] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
    for (int64_t j = 0; j < n_behavior && j < 32; ++j)
      c.runtime_compiled |= behavior[j] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
    c.knobs = knob_choices(configs[i].get());
    c.mode = mode == CUDNN_HEUR_MODE_A ? "A" : mode == CUDNN_HEUR_MODE_B ? "B" : "fallback";
    c.config = std::move(configs[i]);
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<SdpaEngineConfig> sdpa_engine_candidates(const SdpaGraph& graph, cudnnBackendDescriptor_t device_prop,
                                                     bool with_knobs) {
  std::vector<SdpaEngineConfig> out;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_B, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<SdpaEngineConfig> configs;
    try {
      configs = sdpa_engine_configs(graph, device_prop, mode);
    } catch (const Error&) {
      if (mode == CUDNN_HEUR_MODE_A) throw;  // B and FALLBACK only add candidates; A is the contract
      continue;
    }
    for (SdpaEngineConfig& c : configs) {
      const bool seen = std::any_of(out.begin(), out.end(), [&](const SdpaEngineConfig& o) {
        return o.engine == c.engine && o.knobs == c.knobs;
      });
      if (!seen) out.push_back(std::move(c));
    }
  }
  if (!with_knobs) return out;
  // Each offered engine again with one tunable knob (KERNEL_CFG or STAGES) set to each value it takes.
  std::vector<int64_t> engines;
  for (const SdpaEngineConfig& c : out)
    if (std::find(engines.begin(), engines.end(), c.engine) == engines.end()) engines.push_back(c.engine);
  for (int64_t id : engines) {
    bool runtime_compiled = false, nondeterministic = false;  // as the heuristics' config of this engine says
    for (const SdpaEngineConfig& c : out)
      if (c.engine == id) runtime_compiled = c.runtime_compiled, nondeterministic = c.nondeterministic;
    for (const KnobRange& r : knob_ranges(graph, id)) {
      if (r.type != CUDNN_KNOB_TYPE_KERNEL_CFG && r.type != CUDNN_KNOB_TYPE_STAGES) continue;
      for (int64_t v = r.min; v <= r.max; v += std::max<int64_t>(r.stride, 1)) {
        const std::vector<std::pair<int64_t, int64_t>> knobs = {{static_cast<int64_t>(r.type), v}};
        const bool seen = std::any_of(out.begin(), out.end(), [&](const SdpaEngineConfig& o) {
          return o.engine == id && o.knobs == knobs;
        });
        if (seen) continue;
        SdpaEngineConfig c = config_with_knob(graph, id, r.type, v);
        c.runtime_compiled = runtime_compiled;
        c.nondeterministic = nondeterministic;
        out.push_back(std::move(c));
      }
    }
  }
  return out;
}

}  // namespace kiln::cuda
