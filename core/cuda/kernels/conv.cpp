// conv2d on CUDA through cuDNN's legacy convolution API. Each call describes its shapes to cuDNN,
// runs the algorithm chosen for them (Note [cuDNN algorithm choice]) with a workspace Tensor from
// the device allocator, on the device's current stream. Batches too large for cuDNN's 32-bit
// sizes are split along N.
#include <kiln/core/cuda/kernels/conv.h>

#include <algorithm>
#include <array>
#include <climits>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <kiln/core/cuda/runtime/check.cuh>
#include <kiln/core/cuda/runtime/cudnn.cuh>
#include <kiln/core/factory.h>

namespace kiln::cuda {

namespace {

// Note [cuDNN algorithm choice]
// As torch does: the first call with a given key (direction, device, dtype, sizes, options and
// the three settings) asks cuDNN for its ranked algorithms, from heuristics (cudnnGet*_v7) or,
// under set_cudnn_benchmark(true), from timing them all (cudnnFind*Ex). Those cuDNN marks as
// supported (and deterministic, when asked) are tried in rank order until one runs (one can still
// fail, e.g. when its workspace cannot be allocated); the one that ran is cached for the key.
// Math types: the descriptor offers FMA only for f32 without TF32, TF32 for f32 by default
// (CUDNN_DEFAULT_MATH), tensor cores for bf16/f16; each algorithm then runs with the math type cuDNN
// ranked it with, except that f32 without TF32 is always forced to CUDNN_FMA_MATH.

constexpr size_t kMaxWorkspace = size_t(1) << 40;           // cuDNN sometimes reports absurd sizes
constexpr size_t kMaxFindWorkspace = size_t(1) << 30;       // what benchmark mode lets Find use
constexpr int64_t kSplitElements = int64_t(256) << 20;      // per-chunk elements when N is split

enum class Direction : int64_t { forward = 0, backward_data = 1, backward_filter = 2 };

struct Settings {
  bool benchmark, deterministic, allow_tf32;
};
Settings settings() { return {cudnn_benchmark(), cudnn_deterministic(), cudnn_allow_tf32()}; }

// One convolution's sizes: x (n, c, h, w), weight (o, c/groups, kh, kw), y (n, o, oh, ow).
struct ConvParams {
  int64_t n, c, h, w, o, kh, kw, oh, ow, groups, ph, pw, sh, sw, dh, dw;
  DType dtype;
};

// The front (kiln::ops) has checked ranks, channels against groups and that the kernel fits.
ConvParams conv_params(const Shape& x, const Shape& weight, const Conv2dOptions& o, DType dtype) {
  ConvParams p{};
  p.n = x[0], p.c = x[1], p.h = x[2], p.w = x[3];
  p.o = weight[0], p.kh = weight[2], p.kw = weight[3];
  p.groups = o.groups_;
  p.ph = o.padding_.h, p.pw = o.padding_.w, p.sh = o.stride_.h, p.sw = o.stride_.w;
  p.dh = o.dilation_.h, p.dw = o.dilation_.w;
  p.oh = (p.h + 2 * p.ph - p.dh * (p.kh - 1) - 1) / p.sh + 1;
  p.ow = (p.w + 2 * p.pw - p.dw * (p.kw - 1) - 1) / p.sw + 1;
  p.dtype = dtype;
  return p;
}

using Key = std::array<int64_t, 20>;

Key make_key(Direction dir, int device, const ConvParams& p, const Settings& s) {
  return {static_cast<int64_t>(dir), device, static_cast<int64_t>(p.dtype), p.n, p.c, p.h, p.w, p.o, p.kh, p.kw,
          p.groups, p.ph, p.pw, p.sh, p.sw, p.dh, p.dw, s.benchmark, s.deterministic, s.allow_tf32};
}

// An algorithm that ran, with its math type and workspace.
struct Choice {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
};

struct ChoiceCache {
  std::mutex mutex;
  std::map<Key, Choice> map;
};
ChoiceCache& choice_cache() {
  static ChoiceCache* c = new ChoiceCache;  // leaked: used until exit
  return *c;
}
std::optional<Choice> cached_choice(const Key& key) {
  ChoiceCache& c = choice_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto it = c.map.find(key);
  if (it == c.map.end()) return std::nullopt;
  return it->second;
}
void cache_choice(const Key& key, const Choice& choice) {
  ChoiceCache& c = choice_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.map[key] = choice;
}

// The descriptors of one convolution (one batch chunk), on the handle of `like`'s device.
struct Descriptors {
  cudnnHandle_t handle = nullptr;
  cudnnDataType_t data = CUDNN_DATA_FLOAT, compute = CUDNN_DATA_FLOAT;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;  // what the algorithm search may use
  bool force_fma = false;                     // f32 without TF32
  TensorDescriptor x, y;
  FilterDescriptor w;
  ConvolutionDescriptor conv;

  Descriptors(const char* op, const ConvParams& p, const Settings& s, const Tensor& like) {
    handle = cudnn_handle_for(like);
    data = cudnn_dtype(p.dtype, op);
    compute = p.dtype == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    if (p.dtype == DType::f32) {
      force_fma = !s.allow_tf32;
      math = force_fma ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
    } else if (p.dtype == DType::f16 || p.dtype == DType::bf16) {
      math = CUDNN_TENSOR_OP_MATH;
    }
    const int n = cudnn_int(p.n, op, "batch"), c = cudnn_int(p.c, op, "input channels");
    const int o = cudnn_int(p.o, op, "output channels"), groups = cudnn_int(p.groups, op, "groups");
    x.set(data, n, c, cudnn_int(p.h, op, "height"), cudnn_int(p.w, op, "width"));
    w.set(data, o, c / groups, cudnn_int(p.kh, op, "kernel height"), cudnn_int(p.kw, op, "kernel width"));
    y.set(data, n, o, cudnn_int(p.oh, op, "output height"), cudnn_int(p.ow, op, "output width"));
    conv.set(cudnn_int(p.ph, op, "padding"), cudnn_int(p.pw, op, "padding"), cudnn_int(p.sh, op, "stride"),
             cudnn_int(p.sw, op, "stride"), cudnn_int(p.dh, op, "dilation"), cudnn_int(p.dw, op, "dilation"), groups,
             compute, math);
    int dims[4] = {0, 0, 0, 0};
    KILN_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv.get(), x.get(), w.get(), &dims[0], &dims[1], &dims[2],
                                                           &dims[3]));
    KILN_ASSERT(dims[0] == n && dims[1] == o && dims[2] == p.oh && dims[3] == p.ow, op, ": cuDNN's output (", dims[0],
                ", ", dims[1], ", ", dims[2], ", ", dims[3], ") differs from Kiln's (", n, ", ", o, ", ", p.oh, ", ",
                p.ow, ")");
  }
};

// Device pointers of one chunk: x (N, C, H, W), w (O, C/groups, kh, kw), y (N, O, OH, OW); which
// of them is written depends on the direction.
struct Buffers {
  void* x;
  void* w;
  void* y;
};

template <Direction D>
struct Ops;

template <>
struct Ops<Direction::forward> {
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  using Algo = cudnnConvolutionFwdAlgo_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  static cudnnStatus_t heuristics(const Descriptors& d, int* count, Perf* perf) {
    return cudnnGetConvolutionForwardAlgorithm_v7(d.handle, d.x.get(), d.w.get(), d.conv.get(), d.y.get(), kCount,
                                                  count, perf);
  }
  static cudnnStatus_t find(const Descriptors& d, const Buffers& b, void* out, void* ws, size_t ws_size, int* count,
                            Perf* perf) {
    return cudnnFindConvolutionForwardAlgorithmEx(d.handle, d.x.get(), b.x, d.w.get(), b.w, d.conv.get(), d.y.get(),
                                                  out, kCount, count, perf, ws, ws_size);
  }
  static cudnnStatus_t workspace(const Descriptors& d, Algo a, size_t* size) {
    return cudnnGetConvolutionForwardWorkspaceSize(d.handle, d.x.get(), d.w.get(), d.conv.get(), d.y.get(), a, size);
  }
  static cudnnStatus_t run(const Descriptors& d, Algo a, void* ws, size_t ws_size, const void* alpha,
                           const void* beta, const Buffers& b) {
    return cudnnConvolutionForward(d.handle, alpha, d.x.get(), b.x, d.w.get(), b.w, d.conv.get(), a, ws, ws_size, beta,
                                   d.y.get(), b.y);
  }
};

template <>
struct Ops<Direction::backward_data> {
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  using Algo = cudnnConvolutionBwdDataAlgo_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  static cudnnStatus_t heuristics(const Descriptors& d, int* count, Perf* perf) {
    return cudnnGetConvolutionBackwardDataAlgorithm_v7(d.handle, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                       kCount, count, perf);
  }
  static cudnnStatus_t find(const Descriptors& d, const Buffers& b, void* out, void* ws, size_t ws_size, int* count,
                            Perf* perf) {
    return cudnnFindConvolutionBackwardDataAlgorithmEx(d.handle, d.w.get(), b.w, d.y.get(), b.y, d.conv.get(),
                                                       d.x.get(), out, kCount, count, perf, ws, ws_size);
  }
  static cudnnStatus_t workspace(const Descriptors& d, Algo a, size_t* size) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(d.handle, d.w.get(), d.y.get(), d.conv.get(), d.x.get(), a,
                                                        size);
  }
  static cudnnStatus_t run(const Descriptors& d, Algo a, void* ws, size_t ws_size, const void* alpha,
                           const void* beta, const Buffers& b) {
    return cudnnConvolutionBackwardData(d.handle, alpha, d.w.get(), b.w, d.y.get(), b.y, d.conv.get(), a, ws, ws_size,
                                        beta, d.x.get(), b.x);
  }
};

template <>
struct Ops<Direction::backward_filter> {
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  using Algo = cudnnConvolutionBwdFilterAlgo_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  static cudnnStatus_t heuristics(const Descriptors& d, int* count, Perf* perf) {
    return cudnnGetConvolutionBackwardFilterAlgorithm_v7(d.handle, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
                                                         kCount, count, perf);
  }
  static cudnnStatus_t find(const Descriptors& d, const Buffers& b, void* out, void* ws, size_t ws_size, int* count,
                            Perf* perf) {
    return cudnnFindConvolutionBackwardFilterAlgorithmEx(d.handle, d.x.get(), b.x, d.y.get(), b.y, d.conv.get(),
                                                         d.w.get(), out, kCount, count, perf, ws, ws_size);
  }
  static cudnnStatus_t workspace(const Descriptors& d, Algo a, size_t* size) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(d.handle, d.x.get(), d.y.get(), d.conv.get(), d.w.get(), a,
                                                          size);
  }
  static cudnnStatus_t run(const Descriptors& d, Algo a, void* ws, size_t ws_size, const void* alpha,
                           const void* beta, const Buffers& b) {
    return cudnnConvolutionBackwardFilter(d.handle, alpha, d.x.get(), b.x, d.y.get(), b.y, d.conv.get(), a, ws,
                                          ws_size, beta, d.w.get(), b.w);
  }
};

const char* direction_name(Direction d) {
  switch (d) {
    case Direction::forward: return "conv2d";
    case Direction::backward_data: return "conv2d_backward_input";
    case Direction::backward_filter: return "conv2d_backward_weight";
  }
  return "conv2d";
}

// A byte workspace on `device`, or an undefined tensor when the allocator cannot give it (the
// allocation error is cleared so that it does not surface at the next launch check).
Tensor try_workspace(size_t bytes, Device device) {
  if (bytes == 0) return Tensor();
  try {
    return empty({static_cast<int64_t>(bytes)}, TensorOptions(DType::u8).device(device));
  } catch (const Error&) {
    (void)cudaGetLastError();
    return Tensor();
  }
}

// The algorithms to try, in cuDNN's rank order (Note [cuDNN algorithm choice]). `find_out` is
// where benchmark mode may write trial results: the output itself, or scratch of its size.
template <Direction D>
std::vector<Choice> candidates(Descriptors& d, const Settings& s, const Buffers& b, void* find_out, Device device) {
  using O = Ops<D>;
  typename O::Perf perf[O::kCount] = {};
  int count = 0;
  d.conv.set_math(d.math);
  if (s.benchmark) {
    size_t ws_size = 0;
    for (int a = 0; a < O::kCount; ++a) {
      size_t size = 0;
      if (O::workspace(d, static_cast<typename O::Algo>(a), &size) == CUDNN_STATUS_SUCCESS && size <= kMaxFindWorkspace)
        ws_size = std::max(ws_size, size);
    }
    Tensor ws = try_workspace(ws_size, device);
    if (!ws.defined()) ws_size = 0;  // Find then times only the algorithms that need none
    KILN_CUDNN_CHECK(O::find(d, b, find_out, ws_size ? ws.data_ptr() : nullptr, ws_size, &count, perf));
  } else {
    KILN_CUDNN_CHECK(O::heuristics(d, &count, perf));
  }
  std::vector<Choice> out;
  for (int i = 0; i < count && i < O::kCount; ++i) {
    const typename O::Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS) continue;
    if (s.deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
    Choice c;
    c.algo = static_cast<int>(p.algo);
    c.math = d.force_fma ? CUDNN_FMA_MATH : p.mathType;
    d.conv.set_math(c.math);
    if (O::workspace(d, p.algo, &c.workspace) != CUDNN_STATUS_SUCCESS || c.workspace >= kMaxWorkspace) continue;
    out.push_back(c);
  }
  return out;
}

// Runs direction D of one chunk: y = conv(x, w), dx = conv^T(dy, w) or dw (+)= dy (*) x.
// `accumulate` adds into the output (beta = 1) instead of overwriting it.
template <Direction D>
void run_conv(Descriptors& d, const ConvParams& p, const Settings& s, const Buffers& b, bool accumulate,
              void* find_out, Device device) {
  using O = Ops<D>;
  const float f_one = 1.f, f_zero = 0.f;
  const double d_one = 1.0, d_zero = 0.0;
  const bool dbl = d.compute == CUDNN_DATA_DOUBLE;
  const void* alpha = dbl ? static_cast<const void*>(&d_one) : static_cast<const void*>(&f_one);
  const void* beta = accumulate ? alpha : (dbl ? static_cast<const void*>(&d_zero) : static_cast<const void*>(&f_zero));
  auto attempt = [&](const Choice& c) {
    d.conv.set_math(c.math);
    Tensor ws = try_workspace(c.workspace, device);
    if (c.workspace > 0 && !ws.defined()) return CUDNN_STATUS_ALLOC_FAILED;
    cudnnStatus_t status = O::run(d, static_cast<typename O::Algo>(c.algo), ws.defined() ? ws.data_ptr() : nullptr,
                                  c.workspace, alpha, beta, b);
    if (status != CUDNN_STATUS_SUCCESS) (void)cudaGetLastError();
    return status;
  };
  const Key key = make_key(D, device.index, p, s);
  if (std::optional<Choice> c = cached_choice(key))
    if (attempt(*c) == CUDNN_STATUS_SUCCESS) return;
  std::string tried;
  for (const Choice& c : candidates<D>(d, s, b, find_out, device)) {
    const cudnnStatus_t status = attempt(c);
    if (status == CUDNN_STATUS_SUCCESS) {
      cache_choice(key, c);
      return;
    }
    tried += detail::str_cat(tried.empty() ? "" : ", ", "algorithm ", c.algo, " (math ", static_cast<int>(c.math),
                             ", workspace ", c.workspace, " bytes): ", cudnnGetErrorString(status));
  }
  KILN_FAIL(direction_name(D), ": no cuDNN algorithm could run for input (", p.n, ", ", p.c, ", ", p.h, ", ",
             p.w, "), weight (", p.o, ", ", p.c / p.groups, ", ", p.kh, ", ", p.kw, "), groups ", p.groups, ", dtype ",
             p.dtype, " on cuda:", device.index, tried.empty() ? std::string("; cuDNN offered none") : "; tried " + tried);
}

// Batch chunks small enough for cuDNN's 32-bit sizes: all of N when both tensors fit, else
// kSplitElements worth of images at a time (torch's split_batch_dim_to_32bit_out).
int64_t batch_chunk(const char* op, const ConvParams& p) {
  const int64_t in = p.c * p.h * p.w, out = p.o * p.oh * p.ow, per = std::max<int64_t>({in, out, 1});
  if (p.n * per <= INT_MAX) return std::max<int64_t>(p.n, 1);
  KILN_CHECK(per <= INT_MAX, op, ": one image has ", per, " elements, more than cuDNN's 32-bit sizes allow (input (",
             p.c, ", ", p.h, ", ", p.w, "), output (", p.o, ", ", p.oh, ", ", p.ow, "))");
  return std::max<int64_t>(1, kSplitElements / per);
}

void* advance(const Tensor& t, int64_t elements) {
  return static_cast<char*>(t.data_ptr()) + elements * static_cast<int64_t>(t.element_size());
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  const ConvParams p = conv_params(x.shape(), weight.shape(), options, x.dtype());
  Tensor y = empty({p.n, p.o, p.oh, p.ow}, TensorOptions(x.dtype()).device(x.device()));
  if (y.numel() == 0) return y;
  if (x.numel() == 0 || weight.numel() == 0) {  // every sum is empty
    y.fill_(0.0);
  } else {
    const Tensor xc = x.contiguous(), wc = weight.contiguous();
    const Settings s = settings();
    const int64_t chunk = batch_chunk("conv2d", p);
    for (int64_t n0 = 0; n0 < p.n; n0 += chunk) {
      ConvParams pc = p;
      pc.n = std::min(chunk, p.n - n0);
      Descriptors d("conv2d", pc, s, xc);
      const Buffers b{advance(xc, n0 * p.c * p.h * p.w), wc.data_ptr(), advance(y, n0 * p.o * p.oh * p.ow)};
      run_conv<Direction::forward>(d, pc, s, b, false, b.y, x.device());
    }
  }
  if (bias.defined()) conv2d_add_bias_(y, bias);
  return y;
}

Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& input_shape,
                             const Conv2dOptions& options) {
  const ConvParams p = conv_params(input_shape, weight.shape(), options, grad_out.dtype());
  Tensor gx = empty(input_shape, TensorOptions(grad_out.dtype()).device(grad_out.device()));
  if (gx.numel() == 0) return gx;
  if (grad_out.numel() == 0 || weight.numel() == 0) {  // every sum is empty
    gx.fill_(0.0);
    return gx;
  }
  const Tensor gy = grad_out.contiguous(), wc = weight.contiguous();
  const Settings s = settings();
  const int64_t chunk = batch_chunk("conv2d_backward_input", p);
  for (int64_t n0 = 0; n0 < p.n; n0 += chunk) {
    ConvParams pc = p;
    pc.n = std::min(chunk, p.n - n0);
    Descriptors d("conv2d_backward_input", pc, s, gy);
    const Buffers b{advance(gx, n0 * p.c * p.h * p.w), wc.data_ptr(), advance(gy, n0 * p.o * p.oh * p.ow)};
    run_conv<Direction::backward_data>(d, pc, s, b, false, b.x, gy.device());
  }
  return gx;
}

Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                              const Conv2dOptions& options) {
  const ConvParams p = conv_params(x.shape(), weight_shape, options, grad_out.dtype());
  Tensor gw = empty(weight_shape, TensorOptions(grad_out.dtype()).device(grad_out.device()));
  if (gw.numel() == 0) return gw;
  if (grad_out.numel() == 0 || x.numel() == 0) {
    gw.fill_(0.0);
    return gw;
  }
  const Tensor gy = grad_out.contiguous(), xc = x.contiguous();
  const Settings s = settings();
  const int64_t chunk = batch_chunk("conv2d_backward_weight", p);
  Tensor find_scratch;  // benchmark trials of later chunks must not overwrite the partial sum in gw
  for (int64_t n0 = 0; n0 < p.n; n0 += chunk) {
    ConvParams pc = p;
    pc.n = std::min(chunk, p.n - n0);
    Descriptors d("conv2d_backward_weight", pc, s, gy);
    const Buffers b{advance(xc, n0 * p.c * p.h * p.w), gw.data_ptr(), advance(gy, n0 * p.o * p.oh * p.ow)};
    const bool accumulate = n0 > 0;
    if (accumulate && s.benchmark && !find_scratch.defined()) find_scratch = empty_like(gw);
    run_conv<Direction::backward_filter>(d, pc, s, b, accumulate, accumulate && s.benchmark ? find_scratch.data_ptr() : b.w,
                                         gy.device());
  }
  return gw;
}

}  // namespace kiln::cuda
