// GradScaler kernels: the fused inf/NaN check and unscale over many gradients in one launch
// (core/cuda/kernels/multi_tensor.cuh), the single-thread scale update, and the found_inf flag helpers.
// Each matches optim/grad_scaler.cpp's CPU arithmetic (see amp.h).
#include <kiln/core/cuda/kernels/amp.h>

#include <kiln/core/cuda/kernels/common.cuh>
#include <kiln/core/cuda/kernels/multi_tensor.cuh>
#include <kiln/core/cuda/plan/optim_step_math.h>

namespace kiln::cuda {

namespace {

using mt::ChunkRange;
using mt::kILP;

void check_scalar(const char* op, const char* what, const Tensor& t, DType dtype, Device device) {
  KILN_CHECK(t.defined() && t.numel() == 1 && t.dtype() == dtype && t.device() == device, op, ": ", what,
             " must be a one-element ", dtype, " tensor on ", device, ", got ",
             t.defined() ? detail::str_cat(t.dtype(), t.shape(), " on ", t.device()) : std::string("undefined"));
}

// found_inf |= any non-finite element; then g *= T(inv_scale) computed in g's accumulation type.
template <class T>
struct UnscaleOp {
  const float* scale;
  float* found_inf;

  template <class Table>
  __device__ void operator()(const Table& tab, ChunkRange r) const {
    // grad_scaler.cpp: inv_scale = float(1 / double(scale)), handed to ops::mul_ as a double,
    // which rounds it to the gradient's dtype.
    const dacc_t<T> inv = load_acc(store_as<T>(math::inv_scale(*scale)));
    T* x = static_cast<T*>(tab.ptr[0][r.t]);
    bool non_finite = false;
    T rx[kILP];
    mt::for_each_ilp(
        r, [&](int k, int64_t i) { rx[k] = x[i]; },
        [&](int k, int64_t i) {
          const dacc_t<T> v = load_acc(rx[k]);
          non_finite |= !isfinite(v);
          x[i] = store_as<T>(v * inv);
        });
    // Every thread of the block reaches this barrier (no early exit above). Blocks that find a
    // non-finite value all store 1: a benign race, as in torch.
    if (__syncthreads_or(non_finite) && threadIdx.x == 0) *found_inf = 1.f;
  }
};

using GradTable = mt::TensorTable<1, mt::NoMeta, 110, 320>;

__global__ void update_scale_kernel(float* scale, int64_t* growth_tracker, const float* found_inf,
                                    double growth_factor, double backoff_factor, int64_t growth_interval) {
  float s = *scale;
  int64_t tracker = *growth_tracker;
  math::update_scale(s, tracker, *found_inf != 0.f, growth_factor, backoff_factor, growth_interval);
  *scale = s;
  *growth_tracker = tracker;
}

constexpr int kMaxFlags = 480;
struct Flags {
  float* ptr[kMaxFlags];
};

// out = any(flags[0..n) != 0) (or'ed into *out when `accumulate`); one thread, reading every
// flag before it writes (out may be one of them).
__global__ void any_flag_kernel(const __grid_constant__ Flags flags, int n, float* out, bool accumulate) {
  bool any = accumulate && *out != 0.f;
  for (int i = 0; i < n; ++i) any = any || *flags.ptr[i] != 0.f;
  *out = any ? 1.f : 0.f;
}

// Every flag = (*src != 0); one thread, reading src before any write (src may be one of them).
template <class S>
__global__ void set_flags_kernel(const __grid_constant__ Flags flags, int n, const S* src) {
  const float value = load_acc(*src) != dacc_t<S>(0) ? 1.f : 0.f;
  for (int i = 0; i < n; ++i) *flags.ptr[i] = value;
}

}  // namespace

void amp_unscale(const std::vector<Tensor>& grads, const Tensor& scale, const Tensor& found_inf) {
  const char* op = "GradScaler::unscale_ (CUDA)";
  KILN_CHECK(scale.defined() && scale.device().is_cuda(), op, ": the scale must be a CUDA tensor");
  const Device device = scale.device();
  check_scalar(op, "scale", scale, DType::f32, device);
  check_scalar(op, "found_inf", found_inf, DType::f32, device);
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    KILN_CHECK(g.defined() && g.device() == device && g.is_contiguous() && is_floating(g.dtype()), op,
               ": gradient ", i, " must be a contiguous floating tensor on ", device, ", got ",
               g.defined() ? detail::str_cat(g.dtype(), g.shape(), " on ", g.device(),
                                             g.is_contiguous() ? "" : " (non-contiguous)")
                           : std::string("undefined"));
  }
  if (grads.empty()) return;
  cudaStream_t stream = stream_for(scale);
  const float* s = ptr<const float>(scale);
  float* flag = ptr<float>(found_inf);
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    std::vector<const Tensor*> list;
    for (const Tensor& g : grads)
      if (g.dtype() == dt) list.push_back(&g);
    if (list.empty()) continue;
    dispatch_floating_device(dt, op, [&]<class T>() {
      mt::pack_and_flush<GradTable>(
          static_cast<int64_t>(list.size()), [&](int64_t j) { return list[j]->numel(); },
          [&](GradTable& tab, int slot, int64_t j) { tab.ptr[0][slot] = list[j]->data_ptr(); },
          [&](const GradTable& tab, int blocks) { mt::launch(tab, blocks, UnscaleOp<T>{s, flag}, stream); });
    });
  }
}

void amp_update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                      double growth_factor, double backoff_factor, int64_t growth_interval) {
  const char* op = "GradScaler::update (CUDA)";
  KILN_CHECK(scale.defined() && scale.device().is_cuda(), op, ": the scale must be a CUDA tensor");
  check_scalar(op, "scale", scale, DType::f32, scale.device());
  check_scalar(op, "growth_tracker", growth_tracker, DType::i64, scale.device());
  check_scalar(op, "found_inf", found_inf, DType::f32, scale.device());
  update_scale_kernel<<<1, 1, 0, stream_for(scale)>>>(ptr<float>(scale), ptr<int64_t>(growth_tracker),
                                                      ptr<const float>(found_inf), growth_factor, backoff_factor,
                                                      growth_interval);
  KILN_CUDA_CHECK_LAUNCH();
}

void amp_any_flag(const Tensor& out, const std::vector<Tensor>& flags) {
  const char* op = "GradScaler::found_inf (CUDA)";
  KILN_CHECK(out.defined() && out.device().is_cuda(), op, ": the output must be a CUDA tensor");
  check_scalar(op, "the output", out, DType::f32, out.device());
  for (const Tensor& f : flags) check_scalar(op, "a found_inf flag", f, DType::f32, out.device());
  cudaStream_t stream = stream_for(out);
  size_t first = 0;
  do {  // at least once: no flags at all gives 0
    Flags list;
    const int n = static_cast<int>(std::min<size_t>(kMaxFlags, flags.size() - first));
    for (int j = 0; j < n; ++j) list.ptr[j] = ptr<float>(flags[first + j]);
    any_flag_kernel<<<1, 1, 0, stream>>>(list, n, ptr<float>(out), first > 0);
    KILN_CUDA_CHECK_LAUNCH();
    first += static_cast<size_t>(n);
  } while (first < flags.size());
}

void amp_set_flags(const std::vector<Tensor>& dsts, const Tensor& src) {
  const char* op = "GradScaler::set_found_inf (CUDA)";
  KILN_CHECK(src.defined() && src.numel() == 1 && src.device().is_cuda(), op,
             ": the flag must be a one-element CUDA tensor");
  for (const Tensor& d : dsts) check_scalar(op, "a found_inf flag", d, DType::f32, src.device());
  cudaStream_t stream = stream_for(src);
  for (size_t first = 0; first < dsts.size(); first += kMaxFlags) {
    Flags list;
    const int n = static_cast<int>(std::min<size_t>(kMaxFlags, dsts.size() - first));
    for (int j = 0; j < n; ++j) list.ptr[j] = ptr<float>(dsts[first + j]);
    dispatch_all_device(src.dtype(), op, [&]<class S>() {
      set_flags_kernel<S><<<1, 1, 0, stream>>>(list, n, ptr<const S>(src));
    });
    KILN_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace kiln::cuda
