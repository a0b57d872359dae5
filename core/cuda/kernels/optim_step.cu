// Fused multi-tensor AdamW and SGD steps and the two halves of clip_grad_norm on CUDA. Each kernel
// follows the CPU loop it mirrors (optim/adamw.cpp, optim/sgd.cpp, optim/clip.cpp) operation for
// operation, with the same coefficients rounded to the parameter's dtype on the host; only AdamW's
// bias corrections are computed on the device, from the device step count (Note [Device step
// counts] in optim/optimizer.h), in double like the CPU's.
#include <kiln/core/cuda/kernels/optim_step.h>

#include <cmath>

#include <kiln/core/cuda/kernels/common.cuh>
#include <kiln/core/cuda/kernels/multi_tensor.cuh>
#include <kiln/core/cuda/plan/optim_step_math.h>
#include <kiln/core/factory.h>

namespace kiln::cuda {

namespace {

using mt::ChunkRange;
using mt::kILP;

// --- argument checks ---------------------------------------------------------------------------

// list[i] is a contiguous tensor shaped like params[i], with params[0]'s device and `dtype`.
void check_list(const char* op, const char* what, const std::vector<Tensor>& list,
                const std::vector<Tensor>& params, DType dtype) {
  KILN_CHECK(list.size() == params.size(), op, ": ", list.size(), " ", what, " for ", params.size(), " parameters");
  const Device device = params.empty() ? Device::cuda() : params[0].device();
  for (size_t i = 0; i < list.size(); ++i) {
    const Tensor& t = list[i];
    KILN_CHECK(t.defined(), op, ": ", what, "[", i, "] is an undefined tensor");
    KILN_CHECK(t.device() == device && t.dtype() == dtype && t.is_contiguous() && t.shape() == params[i].shape(), op,
               ": ", what, "[", i, "] must be a contiguous ", dtype, params[i].shape(), " tensor on ", device,
               ", got ", t.dtype(), t.shape(), " on ", t.device(), t.is_contiguous() ? "" : " (non-contiguous)");
  }
}

// fn<T>() with T the parameters' type: double for f64, float for f32 (the only two the checks pass).
template <class F>
void with_param_type(DType dt, F&& fn) {
  if (dt == DType::f64) fn.template operator()<double>();
  else fn.template operator()<float>();
}

// params: f32/f64, one CUDA device; steps: one-element i64 on that device. Returns the dtype.
DType check_params_and_steps(const char* op, const std::vector<Tensor>& params, const std::vector<Tensor>& steps) {
  KILN_CHECK(!params.empty(), op, ": no parameters");
  const Tensor& p0 = params[0];
  KILN_CHECK(p0.defined() && p0.device().is_cuda(), op, ": parameters must be CUDA tensors, got one on ",
             p0.defined() ? p0.device() : Device::cpu());
  KILN_CHECK(p0.dtype() == DType::f32 || p0.dtype() == DType::f64, op, ": parameters must be f32 or f64, got ",
             p0.dtype());
  for (size_t i = 0; i < params.size(); ++i)
    KILN_CHECK(params[i].defined() && params[i].device() == p0.device() && params[i].dtype() == p0.dtype() &&
                   params[i].is_contiguous(),
               op, ": parameter ", i, " must be a contiguous ", p0.dtype(), " tensor on ", p0.device(), " like "
               "parameter 0");
  KILN_CHECK(steps.size() == params.size(), op, ": ", steps.size(), " step counters for ", params.size(),
             " parameters");
  for (size_t i = 0; i < steps.size(); ++i)
    KILN_CHECK(steps[i].defined() && steps[i].numel() == 1 && steps[i].dtype() == DType::i64 &&
                   steps[i].device() == p0.device(),
               op, ": step counter ", i, " must be a one-element i64 tensor on ", p0.device());
  return p0.dtype();
}

// The found_inf flag as a device pointer (null when undefined).
const float* flag_ptr(const char* op, const Tensor& found_inf, Device device) {
  if (!found_inf.defined()) return nullptr;
  KILN_CHECK(found_inf.numel() == 1 && found_inf.dtype() == DType::f32 && found_inf.device() == device, op,
             ": found_inf must be a one-element f32 tensor on ", device, ", got ", found_inf.dtype(),
             found_inf.shape(), " on ", found_inf.device());
  return ptr<const float>(found_inf);
}

// --- step counters -------------------------------------------------------------------------------

constexpr int kMaxCounters = 480;
struct Counters {
  int64_t* step[kMaxCounters];
};

// ++*step[i] for i < n, unless *found_inf != 0 (then the whole step is skipped).
__global__ void advance_steps_kernel(const __grid_constant__ Counters c, int n, const float* found_inf) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n || (found_inf && *found_inf != 0.f)) return;
  ++*c.step[i];
}

void advance_steps(const std::vector<Tensor>& steps, const float* found_inf, cudaStream_t stream) {
  for (size_t first = 0; first < steps.size(); first += kMaxCounters) {
    Counters c;
    const int n = static_cast<int>(std::min<size_t>(kMaxCounters, steps.size() - first));
    for (int j = 0; j < n; ++j) c.step[j] = ptr<int64_t>(steps[first + j]);
    constexpr int kThreads = 128;
    advance_steps_kernel<<<static_cast<int>(ceil_div(n, kThreads)), kThreads, 0, stream>>>(c, n, found_inf);
    KILN_CUDA_CHECK_LAUNCH();
  }
}

// --- AdamW -----------------------------------------------------------------------------------------

struct StepMeta {
  const int64_t* step;  // already advanced: the 1-based number of this update
};

// Lists: 0 params, 1 grads, 2 exp_avg, 3 exp_avg_sq, 4 max_exp_avg_sq (amsgrad).
template <class T, bool kAmsgrad>
struct AdamWOp {
  math::AdamWCoeffs<T> c;
  double lr, beta1, beta2;  // for the bias corrections
  double eps, weight_decay;  // to recompute c from lr_device
  const float* found_inf;   // null: never skipped
  const double* lr_device;  // null: lr; else the learning rate, read now (Note [Learning rate on the device])

  template <class Table>
  __device__ void operator()(const Table& tab, ChunkRange r) const {
    if (found_inf && *found_inf != 0.f) return;
    double lr = this->lr;
    math::AdamWCoeffs<T> c = this->c;
    if (lr_device) {
      lr = *lr_device;
      c = math::adamw_coeffs<T>(lr, beta1, beta2, eps, weight_decay);
    }
    T* p = static_cast<T*>(tab.ptr[0][r.t]);
    const T* g = static_cast<const T*>(tab.ptr[1][r.t]);
    T* m = static_cast<T*>(tab.ptr[2][r.t]);
    T* v = static_cast<T*>(tab.ptr[3][r.t]);
    T* vmax = nullptr;
    if constexpr (kAmsgrad) vmax = static_cast<T*>(tab.ptr[4][r.t]);
    const math::AdamWStepCoeffs<T> sc =
        math::adamw_step_coeffs<T>(lr, beta1, beta2, static_cast<double>(*tab.meta[r.t].step));
    T rp[kILP], rg[kILP], rm[kILP], rv[kILP], rmax[kILP];
    mt::for_each_ilp(
        r,
        [&](int k, int64_t i) {
          rp[k] = p[i];
          rg[k] = g[i];
          rm[k] = m[i];
          rv[k] = v[i];
          if constexpr (kAmsgrad) rmax[k] = vmax[i];
        },
        [&](int k, int64_t i) {
          math::adamw_element<T, kAmsgrad>(rp[k], rg[k], rm[k], rv[k], rmax[k], c, sc);
          p[i] = rp[k];
          m[i] = rm[k];
          v[i] = rv[k];
          if constexpr (kAmsgrad) vmax[i] = rmax[k];
        });
  }
};

template <class T, bool kAmsgrad>
void launch_adamw(const AdamWTensors& t, const AdamWHyper& h, const float* found_inf, const double* lr_device,
                  cudaStream_t stream) {
  // Note [Multi-tensor table] sizes: depth * 8 + 16 bytes per tensor, 5 per block, under 4 KiB.
  using Table = mt::TensorTable<kAmsgrad ? 5 : 4, StepMeta, kAmsgrad ? 36 : 40, 320>;
  const AdamWOp<T, kAmsgrad> op{math::adamw_coeffs<T>(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay),
                                h.lr,  h.beta1, h.beta2, h.eps, h.weight_decay, found_inf, lr_device};
  mt::pack_and_flush<Table>(
      static_cast<int64_t>(t.params.size()), [&](int64_t i) { return t.params[i].numel(); },
      [&](Table& tab, int slot, int64_t i) {
        tab.ptr[0][slot] = t.params[i].data_ptr();
        tab.ptr[1][slot] = t.grads[i].data_ptr();
        tab.ptr[2][slot] = t.exp_avgs[i].data_ptr();
        tab.ptr[3][slot] = t.exp_avg_sqs[i].data_ptr();
        if constexpr (kAmsgrad) tab.ptr[4][slot] = t.max_exp_avg_sqs[i].data_ptr();
        tab.meta[slot] = StepMeta{ptr<const int64_t>(t.steps[i])};
      },
      [&](const Table& tab, int blocks) { mt::launch(tab, blocks, op, stream); });
}

// --- SGD -------------------------------------------------------------------------------------------

struct SgdMeta {
  const int64_t* step;  // already advanced
  uint8_t fresh;        // the momentum buffer holds nothing yet
};

// Lists: 0 params, 1 grads, 2 momentum buffers (kMomentum).
template <class T, bool kMomentum>
struct SgdOp {
  math::SgdCoeffs<T> c;
  SGDHyper h;               // to recompute c from lr_device
  const float* found_inf;
  const double* lr_device;  // null: h.lr; else the learning rate, read now (Note [Learning rate on the device])

  template <class Table>
  __device__ void operator()(const Table& tab, ChunkRange r) const {
    if (found_inf && *found_inf != 0.f) return;
    math::SgdCoeffs<T> c = this->c;
    if (lr_device) c = math::sgd_coeffs<T>(*lr_device, h.momentum, h.dampening, h.weight_decay, h.nesterov);
    T* p = static_cast<T*>(tab.ptr[0][r.t]);
    const T* g = static_cast<const T*>(tab.ptr[1][r.t]);
    T* buf = nullptr;
    bool first = false;
    if constexpr (kMomentum) {
      buf = static_cast<T*>(tab.ptr[2][r.t]);
      first = math::sgd_first_update(tab.meta[r.t].fresh != 0, *tab.meta[r.t].step);
    }
    T rp[kILP], rg[kILP], rb[kILP];
    mt::for_each_ilp(
        r,
        [&](int k, int64_t i) {
          rp[k] = p[i];
          rg[k] = g[i];
          rb[k] = T(0);
          if constexpr (kMomentum)
            if (!first) rb[k] = buf[i];  // a fresh buffer is never read
        },
        [&](int k, int64_t i) {
          math::sgd_element<T, kMomentum>(rp[k], rg[k], rb[k], first, c);
          p[i] = rp[k];
          if constexpr (kMomentum) buf[i] = rb[k];
        });
  }
};

template <class T, bool kMomentum>
void launch_sgd(const SGDTensors& t, const SGDHyper& h, const float* found_inf, const double* lr_device,
                cudaStream_t stream) {
  using Table = mt::TensorTable<kMomentum ? 3 : 2, SgdMeta, 40, 320>;
  const SgdOp<T, kMomentum> op{math::sgd_coeffs<T>(h.lr, h.momentum, h.dampening, h.weight_decay, h.nesterov), h,
                               found_inf, lr_device};
  mt::pack_and_flush<Table>(
      static_cast<int64_t>(t.params.size()), [&](int64_t i) { return t.params[i].numel(); },
      [&](Table& tab, int slot, int64_t i) {
        tab.ptr[0][slot] = t.params[i].data_ptr();
        tab.ptr[1][slot] = t.grads[i].data_ptr();
        uint8_t fresh = 0;
        if constexpr (kMomentum) {
          tab.ptr[2][slot] = t.momentum_buffers[i].data_ptr();
          fresh = t.fresh[i];
        }
        tab.meta[slot] = SgdMeta{ptr<const int64_t>(t.steps[i]), fresh};
      },
      [&](const Table& tab, int blocks) { mt::launch(tab, blocks, op, stream); });
}

// --- clip_grad_norm --------------------------------------------------------------------------------

enum class NormKind { l1, l2, inf, p };

// Each block writes sum |x|^p (max |x| for inf) over its chunk, in double, to partial[block_base + b].
template <class T, NormKind K>
struct NormOp {
  double p;
  double* partial;
  int64_t block_base;

  template <class Table>
  __device__ void operator()(const Table& tab, ChunkRange r) const {
    __shared__ double scratch[32];
    const T* x = static_cast<const T*>(tab.ptr[0][r.t]);
    double acc = 0.0;
    T rx[kILP];
    mt::for_each_ilp(
        r, [&](int k, int64_t i) { rx[k] = x[i]; },
        [&](int k, int64_t) {
          const double a = fabs(static_cast<double>(load_acc(rx[k])));
          if constexpr (K == NormKind::inf) acc = mt::nan_max(acc, a);
          else if constexpr (K == NormKind::l2) acc += a * a;
          else if constexpr (K == NormKind::l1) acc += a;
          else acc += pow(a, p);
        });
    acc = mt::block_reduce_double<K == NormKind::inf>(acc, scratch);
    if (threadIdx.x == 0) partial[block_base + blockIdx.x] = acc;
  }
};

// One block combines the partials in a fixed order (deterministic) into the total and the
// coefficient, as clip.cpp does.
template <NormKind K>
__global__ void norm_finish_kernel(const double* partial, int64_t count, double p, double max_norm,
                                   double* total, double* clip_coef) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x)
    acc = K == NormKind::inf ? mt::nan_max(acc, partial[i]) : acc + partial[i];
  acc = mt::block_reduce_double<K == NormKind::inf>(acc, scratch);
  if (threadIdx.x == 0) {
    const double norm = math::norm_from_sum(acc, p, K == NormKind::inf);
    *total = norm;
    *clip_coef = math::clip_coef(max_norm, norm);
  }
}

// g *= clip_coef (rounded to T first, like ops::mul_'s scalar) unless clip_coef >= 1.
template <class T>
struct ScaleOp {
  const double* clip_coef;

  template <class Table>
  __device__ void operator()(const Table& tab, ChunkRange r) const {
    const double coef = *clip_coef;
    if (coef >= 1.0) return;  // min(1, coef) with NaN propagating: a factor of 1 changes nothing
    const dacc_t<T> a = load_acc(store_as<T>(coef));
    T* x = static_cast<T*>(tab.ptr[0][r.t]);
    T rx[kILP];
    mt::for_each_ilp(
        r, [&](int k, int64_t i) { rx[k] = x[i]; }, [&](int k, int64_t i) { x[i] = store_as<T>(load_acc(rx[k]) * a); });
  }
};

using GradTable = mt::TensorTable<1, mt::NoMeta, 110, 320>;

// Gradients: defined, contiguous, on one CUDA device. Returns that device.
Device check_grads(const char* op, const std::vector<Tensor>& grads) {
  KILN_CHECK(!grads.empty(), op, ": no gradients");
  const Device device = grads[0].device();
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    KILN_CHECK(g.defined() && g.device().is_cuda() && g.device() == device && g.is_contiguous(), op, ": gradient ",
               i, " must be a contiguous tensor on ", device, ", got ",
               g.defined() ? g.device().str() + (g.is_contiguous() ? "" : " (non-contiguous)") : "undefined");
    KILN_CHECK(is_floating(g.dtype()), op, ": gradient ", i, " has dtype ", g.dtype(), "; expected a floating dtype");
  }
  return device;
}

// Calls fn(dtype, indices) for each floating dtype present among `grads`.
template <class Fn>
void for_each_dtype(const std::vector<Tensor>& grads, Fn fn) {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    std::vector<size_t> idx;
    for (size_t i = 0; i < grads.size(); ++i)
      if (grads[i].dtype() == dt) idx.push_back(i);
    if (!idx.empty()) fn(dt, idx);
  }
}

template <NormKind K>
void launch_norm(const std::vector<Tensor>& grads, double p, double max_norm, const GradNorm& out,
                 cudaStream_t stream) {
  int64_t chunks = 0;
  for (const Tensor& g : grads) chunks += mt::chunk_count(g.numel());
  Tensor partial = empty(Shape{chunks}, DType::f64, grads[0].device());
  int64_t block_base = 0;
  for_each_dtype(grads, [&](DType dt, const std::vector<size_t>& idx) {
    dispatch_floating_device(dt, "clip_grad_norm", [&]<class T>() {
      mt::pack_and_flush<GradTable>(
          static_cast<int64_t>(idx.size()), [&](int64_t j) { return grads[idx[j]].numel(); },
          [&](GradTable& tab, int slot, int64_t j) { tab.ptr[0][slot] = grads[idx[j]].data_ptr(); },
          [&](const GradTable& tab, int blocks) {
            mt::launch(tab, blocks, NormOp<T, K>{p, ptr<double>(partial), block_base}, stream);
            block_base += blocks;
          });
    });
  });
  KILN_ASSERT(block_base == chunks, "clip_grad_norm: ", block_base, " blocks for ", chunks, " chunks");
  norm_finish_kernel<K><<<1, 512, 0, stream>>>(ptr<const double>(partial), chunks, p, max_norm,
                                               ptr<double>(out.total), ptr<double>(out.clip_coef));
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace

// The learning rate's device copy, checked: 0-dim f64 on `device`; null when undefined.
static const double* lr_ptr(const char* op, const Tensor& lr_device, Device device) {
  if (!lr_device.defined()) return nullptr;
  KILN_CHECK(lr_device.numel() == 1 && lr_device.dtype() == DType::f64 && lr_device.device() == device, op,
             ": the learning rate on the device must be a one-element f64 tensor on ", device, ", got ",
             lr_device.dtype(), " ", lr_device.shape(), " on ", lr_device.device());
  return ptr<const double>(lr_device);
}

void adamw_step(const AdamWTensors& t, const AdamWHyper& h, const Tensor& found_inf, const Tensor& lr_device) {
  const char* op = "AdamW (CUDA)";
  const DType dt = check_params_and_steps(op, t.params, t.steps);
  check_list(op, "grads", t.grads, t.params, dt);
  check_list(op, "exp_avgs", t.exp_avgs, t.params, dt);
  check_list(op, "exp_avg_sqs", t.exp_avg_sqs, t.params, dt);
  if (h.amsgrad) check_list(op, "max_exp_avg_sqs", t.max_exp_avg_sqs, t.params, dt);
  const float* flag = flag_ptr(op, found_inf, t.params[0].device());
  const double* lr = lr_ptr(op, lr_device, t.params[0].device());
  cudaStream_t stream = stream_for(t.params[0]);
  advance_steps(t.steps, flag, stream);  // first: the kernels read the new count
  with_param_type(dt, [&]<class T>() {
    dispatch_bool(h.amsgrad, [&]<bool kAmsgrad>() { launch_adamw<T, kAmsgrad>(t, h, flag, lr, stream); });
  });
}

void sgd_step(const SGDTensors& t, const SGDHyper& h, const Tensor& found_inf, const Tensor& lr_device) {
  const char* op = "SGD (CUDA)";
  const DType dt = check_params_and_steps(op, t.params, t.steps);
  check_list(op, "grads", t.grads, t.params, dt);
  const bool momentum = h.momentum != 0.0;
  if (momentum) {
    check_list(op, "momentum_buffers", t.momentum_buffers, t.params, dt);
    KILN_CHECK(t.fresh.size() == t.params.size(), op, ": ", t.fresh.size(), " fresh flags for ", t.params.size(),
               " parameters");
  }
  const float* flag = flag_ptr(op, found_inf, t.params[0].device());
  const double* lr = lr_ptr(op, lr_device, t.params[0].device());
  cudaStream_t stream = stream_for(t.params[0]);
  advance_steps(t.steps, flag, stream);
  with_param_type(dt, [&]<class T>() {
    dispatch_bool(momentum, [&]<bool kMomentum>() { launch_sgd<T, kMomentum>(t, h, flag, lr, stream); });
  });
}

GradNorm grad_norm(const std::vector<Tensor>& grads, double norm_type, double max_norm) {
  const Device device = check_grads("clip_grad_norm", grads);
  KILN_CHECK(norm_type > 0.0, "clip_grad_norm: norm_type must be > 0 or inf, got ", norm_type);
  cudaStream_t stream = stream_for(grads[0]);
  GradNorm out{empty(Shape{}, DType::f64, device), empty(Shape{}, DType::f64, device)};
  if (std::isinf(norm_type))
    launch_norm<NormKind::inf>(grads, norm_type, max_norm, out, stream);
  else if (norm_type == 2.0)
    launch_norm<NormKind::l2>(grads, norm_type, max_norm, out, stream);
  else if (norm_type == 1.0)
    launch_norm<NormKind::l1>(grads, norm_type, max_norm, out, stream);
  else
    launch_norm<NormKind::p>(grads, norm_type, max_norm, out, stream);
  return out;
}

void clip_grads(const std::vector<Tensor>& grads, const Tensor& clip_coef) {
  const Device device = check_grads("clip_grad_norm", grads);
  KILN_CHECK(clip_coef.defined() && clip_coef.numel() == 1 && clip_coef.dtype() == DType::f64 &&
                 clip_coef.device() == device,
             "clip_grad_norm: the clip coefficient must be a one-element f64 tensor on ", device);
  cudaStream_t stream = stream_for(grads[0]);
  const double* coef = ptr<const double>(clip_coef);
  for_each_dtype(grads, [&](DType dt, const std::vector<size_t>& idx) {
    dispatch_floating_device(dt, "clip_grad_norm", [&]<class T>() {
      mt::pack_and_flush<GradTable>(
          static_cast<int64_t>(idx.size()), [&](int64_t j) { return grads[idx[j]].numel(); },
          [&](GradTable& tab, int slot, int64_t j) { tab.ptr[0][slot] = grads[idx[j]].data_ptr(); },
          [&](const GradTable& tab, int blocks) { mt::launch(tab, blocks, ScaleOp<T>{coef}, stream); });
    });
  });
}

}  // namespace kiln::cuda
