// CUDA pooling kernels (pool.h): one thread per output element for the forward kernels, one per
// input element for the average backward kernels (a gather over the windows covering it, index
// math in pool_index.h), and an atomic scatter through the saved argmax for max backward.
// Values are computed in dacc_t (float for 16-bit types), like the CPU's acc_t.
#include <kiln/core/cuda/kernels/pool.h>

#include <kiln/core/cuda/kernels/common.cuh>
#include <kiln/core/kernels/pool_index.h>
#include <kiln/core/factory.h>

namespace kiln::cuda {

namespace {

using pool_index::Planes;
using pool_index::planes_of;
using pool_index::Range;
using pool_index::with_plane;

#define KILN_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// x (planes, H, W) -> y, idx (planes, OH, OW). The window walk is the CPU kernel's: taps from the
// first non-negative one, the first strict maximum wins, a NaN always takes over.
template <class T>
__global__ void max_pool_kernel(const T* x, T* y, int64_t* idx, int64_t planes, int64_t h, int64_t w, PoolWindow win) {
  using A = dacc_t<T>;
  const int64_t total = planes * win.oh * win.ow;
  KILN_GRID_STRIDE(o, total) {
    const int64_t ox = o % win.ow, oy = (o / win.ow) % win.oh, plane = o / (win.ow * win.oh);
    const T* xp = x + plane * h * w;
    const int64_t ys = oy * win.sh - win.ph, xs = ox * win.sw - win.pw;
    const int64_t y1 = min(ys + (win.kh - 1) * win.dh + 1, h), x1 = min(xs + (win.kw - 1) * win.dw + 1, w);
    const int64_t y0 = pool_index::first_tap(ys, win.dh), x0 = pool_index::first_tap(xs, win.dw);
    int64_t best = y0 * w + x0;
    A best_value = -static_cast<A>(INFINITY);
    for (int64_t iy = y0; iy < y1; iy += win.dh)
      for (int64_t ix = x0; ix < x1; ix += win.dw) {
        const A v = load_acc(xp[iy * w + ix]);
        if (v > best_value || isnan(v)) {
          best_value = v;
          best = iy * w + ix;
        }
      }
    y[o] = store_as<T>(best_value);
    idx[o] = best;
  }
}

// gx (planes, H*W) += gy (planes, OH*OW) routed through idx; Acc is float (f32, bf16, f16) or double.
template <class T, class Acc>
__global__ void max_pool_backward_kernel(const T* gy, const int64_t* idx, Acc* gx, int64_t planes, int64_t n_out,
                                         int64_t n_in) {
  const int64_t total = planes * n_out;
  KILN_GRID_STRIDE(o, total) {
    const int64_t k = idx[o];
    if (k < 0 || k >= n_in) continue;  // not an argmax of this plane (the CPU raises an error)
    atomicAdd(gx + (o / n_out) * n_in + k, static_cast<Acc>(load_acc(gy[o])));
  }
}

// out (n) = in (n) rounded to T.
template <class T>
__global__ void round_kernel(const float* in, T* out, int64_t n) {
  KILN_GRID_STRIDE(i, n) out[i] = store_as<T>(in[i]);
}

// x (planes, H, W) -> y (planes, OH, OW): the window's sum over kh*kw (padding counts).
template <class T>
__global__ void avg_pool_kernel(const T* x, T* y, int64_t planes, int64_t h, int64_t w, PoolWindow win) {
  using A = dacc_t<T>;
  const A divisor = static_cast<A>(win.kh * win.kw);
  const int64_t total = planes * win.oh * win.ow;
  KILN_GRID_STRIDE(o, total) {
    const int64_t ox = o % win.ow, oy = (o / win.ow) % win.oh, plane = o / (win.ow * win.oh);
    const T* xp = x + plane * h * w;
    const int64_t y0 = oy * win.sh - win.ph, x0 = ox * win.sw - win.pw;
    const int64_t y1 = min(y0 + win.kh, h), x1 = min(x0 + win.kw, w);
    A sum = 0;
    for (int64_t iy = max(y0, int64_t(0)); iy < y1; ++iy)
      for (int64_t ix = max(x0, int64_t(0)); ix < x1; ++ix) sum += load_acc(xp[iy * w + ix]);
    y[o] = store_as<T>(sum / divisor);
  }
}

// gy (planes, OH, OW) -> gx (planes, H, W): each input pixel sums grad/divisor over the windows
// covering it, rows then columns ascending (the CPU's scatter order).
template <class T>
__global__ void avg_pool_backward_kernel(const T* gy, T* gx, int64_t planes, int64_t h, int64_t w, PoolWindow win) {
  using A = dacc_t<T>;
  const A divisor = static_cast<A>(win.kh * win.kw);
  const int64_t total = planes * h * w;
  KILN_GRID_STRIDE(i, total) {
    const int64_t ix = i % w, iy = (i / w) % h, plane = i / (w * h);
    const T* gp = gy + plane * win.oh * win.ow;
    const Range ry = pool_index::windows_covering(iy, win.kh, win.sh, win.ph, win.oh);
    const Range rx = pool_index::windows_covering(ix, win.kw, win.sw, win.pw, win.ow);
    A acc = 0;
    for (int64_t oy = ry.begin; oy < ry.end; ++oy)
      for (int64_t ox = rx.begin; ox < rx.end; ++ox) acc += load_acc(gp[oy * win.ow + ox]) / divisor;
    gx[i] = store_as<T>(acc);
  }
}

// x (planes, H, W) -> y (planes, OH, OW), output (oy, ox) averaging its adaptive window.
template <class T>
__global__ void adaptive_avg_pool_kernel(const T* x, T* y, int64_t planes, int64_t h, int64_t w, int64_t oh,
                                         int64_t ow) {
  using A = dacc_t<T>;
  const int64_t total = planes * oh * ow;
  KILN_GRID_STRIDE(o, total) {
    const int64_t ox = o % ow, oy = (o / ow) % oh, plane = o / (ow * oh);
    const T* xp = x + plane * h * w;
    const int64_t y0 = pool_index::adaptive_start(oy, h, oh), y1 = pool_index::adaptive_end(oy, h, oh);
    const int64_t x0 = pool_index::adaptive_start(ox, w, ow), x1 = pool_index::adaptive_end(ox, w, ow);
    A sum = 0;
    for (int64_t iy = y0; iy < y1; ++iy)
      for (int64_t ix = x0; ix < x1; ++ix) sum += load_acc(xp[iy * w + ix]);
    y[o] = store_as<T>(sum / static_cast<A>((y1 - y0) * (x1 - x0)));
  }
}

// gy (planes, OH, OW) -> gx (planes, H, W): the gather form of the CPU's scatter.
template <class T>
__global__ void adaptive_avg_pool_backward_kernel(const T* gy, T* gx, int64_t planes, int64_t h, int64_t w,
                                                  int64_t oh, int64_t ow) {
  using A = dacc_t<T>;
  const int64_t total = planes * h * w;
  KILN_GRID_STRIDE(i, total) {
    const int64_t ix = i % w, iy = (i / w) % h, plane = i / (w * h);
    const T* gp = gy + plane * oh * ow;
    const Range ry = pool_index::adaptive_covering(iy, h, oh), rx = pool_index::adaptive_covering(ix, w, ow);
    A acc = 0;
    for (int64_t oy = ry.begin; oy < ry.end; ++oy) {
      const int64_t rows = pool_index::adaptive_end(oy, h, oh) - pool_index::adaptive_start(oy, h, oh);
      for (int64_t ox = rx.begin; ox < rx.end; ++ox) {
        const int64_t cols = pool_index::adaptive_end(ox, w, ow) - pool_index::adaptive_start(ox, w, ow);
        acc += load_acc(gp[oy * ow + ox]) / static_cast<A>(rows * cols);
      }
    }
    gx[i] = store_as<T>(acc);
  }
}

#undef KILN_GRID_STRIDE

TensorOptions like(const Tensor& t, DType dtype) { return TensorOptions(dtype).device(t.device()); }

// out (fresh, of out_shape, in's dtype and device) = one thread per output element:
// launch<T>(in (contiguous), out, grid, stream) starts the kernel (the average pools and their
// backwards).
template <class Launch>
Tensor launch_per_output(const char* op, const Tensor& in, const Shape& out_shape, Launch&& launch) {
  Tensor out = empty(out_shape, like(in, in.dtype()));
  const int64_t total = out.numel();
  if (total == 0) return out;
  const Tensor ic = in.contiguous();
  cudaStream_t s = stream_for(ic);
  dispatch_floating_device(in.dtype(), op, [&]<class T>() {
    launch.template operator()<T>(ptr<T>(ic), ptr<T>(out), blocks_for(total), s);
    KILN_CUDA_CHECK_LAUNCH();
  });
  return out;
}

}  // namespace

ops::MaxPool2dResult max_pool2d(const Tensor& x, const PoolWindow& window) {
  const Planes p = planes_of(x.shape());
  const Shape out_shape = with_plane(x.shape(), window.oh, window.ow);
  ops::MaxPool2dResult r{empty(out_shape, like(x, x.dtype())), empty(out_shape, like(x, DType::i64))};
  const int64_t total = p.count * window.oh * window.ow;
  if (total == 0) return r;
  const Tensor xc = x.contiguous();
  cudaStream_t s = stream_for(xc);
  dispatch_floating_device(x.dtype(), "max_pool2d", [&]<class T>() {
    max_pool_kernel<T><<<blocks_for(total), kThreads, 0, s>>>(ptr<T>(xc), ptr<T>(r.out), ptr<int64_t>(r.indices),
                                                              p.count, p.h, p.w, window);
    KILN_CUDA_CHECK_LAUNCH();
  });
  return r;
}

Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Shape& input_shape) {
  const Planes p = planes_of(input_shape);
  const int64_t n_in = p.h * p.w;
  const int64_t n_out = grad_out.size(grad_out.dim() - 2) * grad_out.size(grad_out.dim() - 1);
  const DType dt = grad_out.dtype();
  Tensor gx = empty(input_shape, like(grad_out, dt));
  if (gx.numel() == 0) return gx;
  cudaStream_t s = stream_for(gx);
  // Sums in float (f32, bf16, f16) or double (f64), straight into gx when it has that type.
  const bool direct = dt == DType::f32 || dt == DType::f64;
  Tensor acc = direct ? gx : empty(input_shape, like(grad_out, DType::f32));
  KILN_CUDA_CHECK(cudaMemsetAsync(acc.data_ptr(), 0, acc.nbytes(), s));
  const int64_t total = p.count * n_out;
  if (total > 0) {
    const Tensor gy = grad_out.contiguous(), ic = indices.contiguous();
    dispatch_floating_device(dt, "max_pool2d_backward", [&]<class T>() {
      using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
      max_pool_backward_kernel<T, Acc><<<blocks_for(total), kThreads, 0, s>>>(ptr<T>(gy), ptr<int64_t>(ic),
                                                                             ptr<Acc>(acc), p.count, n_out, n_in);
      KILN_CUDA_CHECK_LAUNCH();
    });
  }
  if (!direct) {
    dispatch_floating_device(dt, "max_pool2d_backward", [&]<class T>() {
      round_kernel<T><<<blocks_for(gx.numel()), kThreads, 0, s>>>(ptr<float>(acc), ptr<T>(gx), gx.numel());
      KILN_CUDA_CHECK_LAUNCH();
    });
  }
  return gx;
}

Tensor avg_pool2d(const Tensor& x, const PoolWindow& window) {
  const Planes p = planes_of(x.shape());
  return launch_per_output("avg_pool2d", x, with_plane(x.shape(), window.oh, window.ow),
                           [&]<class T>(const T* xp, T* yp, int blocks, cudaStream_t s) {
                             avg_pool_kernel<T><<<blocks, kThreads, 0, s>>>(xp, yp, p.count, p.h, p.w, window);
                           });
}

Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& input_shape, const PoolWindow& window) {
  const Planes p = planes_of(input_shape);
  return launch_per_output("avg_pool2d_backward", grad_out, input_shape,
                           [&]<class T>(const T* gy, T* gx, int blocks, cudaStream_t s) {
                             avg_pool_backward_kernel<T><<<blocks, kThreads, 0, s>>>(gy, gx, p.count, p.h, p.w, window);
                           });
}

Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size) {
  const Planes p = planes_of(x.shape());
  return launch_per_output("adaptive_avg_pool2d", x, with_plane(x.shape(), output_size.h, output_size.w),
                           [&]<class T>(const T* xp, T* yp, int blocks, cudaStream_t s) {
                             adaptive_avg_pool_kernel<T><<<blocks, kThreads, 0, s>>>(xp, yp, p.count, p.h, p.w,
                                                                                    output_size.h, output_size.w);
                           });
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Shape& input_shape) {
  const Planes p = planes_of(input_shape);
  const int64_t oh = grad_out.size(grad_out.dim() - 2), ow = grad_out.size(grad_out.dim() - 1);
  return launch_per_output("adaptive_avg_pool2d_backward", grad_out, input_shape,
                           [&]<class T>(const T* gy, T* gx, int blocks, cudaStream_t s) {
                             adaptive_avg_pool_backward_kernel<T><<<blocks, kThreads, 0, s>>>(gy, gx, p.count, p.h,
                                                                                             p.w, oh, ow);
                           });
}

}  // namespace kiln::cuda
