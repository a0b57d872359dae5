// Shared test helpers: seeded random inputs (never all zeros), an independent element reader
// (strides walked by hand, not through Kiln's copy kernels), tolerance per dtype, closeness checks
// that print the first mismatch, and error-message assertions.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <kiln/kiln.h>
// Tests also reach the internals users do not see: the raw kernels and the CUDA runtime.
#include <kiln/core/cuda/runtime/allocator.h>
#include <kiln/core/cuda/runtime/deferred_check.h>
#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/cuda/runtime/stream.h>
#include <kiln/core/ops/ops.h>

namespace kiln::test {

// Exit 77 (CTest: skipped) when there is no usable CUDA device.
inline void require_cuda() {
  if (!cuda::is_available()) {
    std::printf("SKIPPED: no usable CUDA device (%s)\n", cuda::build_info().c_str());
    std::exit(77);
  }
}

// Uniform in [lo, hi) from a seeded generator, in any dtype (integers are rounded).
inline Tensor random(const Shape& shape, DType dtype = DType::f32, uint64_t seed = 1, double lo = -2.0,
                     double hi = 2.0) {
  Generator g(seed);
  Tensor u = rand(shape, g, DType::f64);
  double* p = u.data<double>();
  for (int64_t i = 0; i < u.numel(); ++i) {
    p[i] = lo + (hi - lo) * p[i];
    if (!is_floating(dtype)) p[i] = std::floor(p[i]);
  }
  return u.to(dtype);
}

// A multi-index, as for_each_index visits and at() reads them.
using Index = std::vector<int64_t>;

// A float of each storage kind, an integer and bool: the dtypes the data-movement ops (index,
// cat/stack, triangles) are checked in against their loop references.
inline constexpr DType kDataTypes[] = {DType::f32, DType::f64, DType::bf16, DType::i64, DType::b8};

// A leaf that requires grad holding `v` (f64) in shape `s`.
inline Tensor leaf(const std::vector<double>& v, const Shape& s) {
  Tensor t = from_vector(v, s);
  t.requires_grad_();
  return t;
}

// A leaf that requires grad, uniform in [lo, hi): f64 unless asked (gradcheck needs f64).
inline Tensor grad_leaf(const Shape& shape, uint64_t seed, double lo = -2.0, double hi = 2.0, DType dtype = DType::f64) {
  Tensor t = random(shape, dtype, seed, lo, hi);
  t.requires_grad_();
  return t;
}
inline Tensor grad_leaf(const Shape& shape, uint64_t seed, DType dtype) { return grad_leaf(shape, seed, -2.0, 2.0, dtype); }

// Overwrites a parameter with seeded values in [-1, 1) (so affine terms are not the trivial 1 / 0).
inline void randomize(const Tensor& p, uint64_t seed) {
  NoGradGuard g;
  Tensor t = p;
  t.copy_(random(p.shape(), p.dtype(), seed, -1.0, 1.0));
}

// The names of (name, tensor) entries, in order (state_dict, named_parameters, ...).
inline std::vector<std::string> names(const std::vector<std::pair<std::string, Tensor>>& entries) {
  std::vector<std::string> out;
  for (const auto& e : entries) out.push_back(e.first);
  return out;
}

// Visits every multi-index of `shape` in row-major order.
inline void for_each_index(const Shape& shape, const std::function<void(const Index&)>& fn) {
  int64_t n = shape_numel(shape);
  Index idx(shape.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    fn(idx);
    for (int64_t d = shape.ndim() - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

// Element at `idx` of a CPU tensor, read through its strides, as double.
inline double at(const Tensor& t, const Index& idx) {
  int64_t off = t.offset();
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
  const char* base = static_cast<const char*>(t.storage()->data()) + off * int64_t(t.element_size());
  switch (t.dtype()) {
    case DType::f32: return *reinterpret_cast<const float*>(base);
    case DType::f64: return *reinterpret_cast<const double*>(base);
    case DType::bf16: return float(*reinterpret_cast<const BFloat16*>(base));
    case DType::f16: return float(*reinterpret_cast<const Half*>(base));
    case DType::i64: return double(*reinterpret_cast<const int64_t*>(base));
    case DType::i32: return *reinterpret_cast<const int32_t*>(base);
    case DType::u8: return *reinterpret_cast<const uint8_t*>(base);
    case DType::b8: return *reinterpret_cast<const bool*>(base) ? 1.0 : 0.0;
  }
  return 0;
}

// All elements in row-major order via at().
inline std::vector<double> values(const Tensor& t) {
  std::vector<double> out;
  out.reserve(t.numel());
  Tensor c = t.to(Device::cpu());
  for_each_index(c.shape(), [&](const Index& i) { out.push_back(at(c, i)); });
  return out;
}

// Relative tolerance per dtype (the computation's rounding, not the reference's).
inline double rtol_for(DType t) {
  switch (t) {
    case DType::f64: return 1e-12;
    case DType::f32: return 1e-5;
    case DType::bf16: return 1e-2;
    case DType::f16: return 2e-3;
    default: return 0;
  }
}

// Exact reference values rounded to `dt` (so overflow to inf in f16 is expected, not an error).
inline std::vector<double> rounded(const std::vector<double>& ref, DType dt) {
  Tensor r = from_vector(ref, {static_cast<int64_t>(ref.size())}).to(dt);
  return values(r);
}

// |a - e| <= atol + rtol * |e| everywhere (NaN matches NaN); reports the first mismatch.
inline void check_close(const std::vector<double>& actual, const std::vector<double>& expected, double rtol,
                        double atol, const std::string& what = "") {
  REQUIRE_MESSAGE(actual.size() == expected.size(), what, ": ", actual.size(), " values vs ", expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    double a = actual[i], e = expected[i];
    bool ok = (std::isnan(a) && std::isnan(e)) || (a == e) || std::fabs(a - e) <= atol + rtol * std::fabs(e);
    if (!ok) {
      FAIL_CHECK(what, ": element ", i, " is ", a, ", expected ", e, " (rtol ", rtol, ", atol ", atol, ")");
      return;
    }
  }
  CHECK(true);
}

inline void check_close(const Tensor& actual, const std::vector<double>& expected, double rtol, double atol,
                        const std::string& what = "") {
  check_close(values(actual), expected, rtol, atol, what);
}

// --- CUDA vs CPU ---------------------------------------------------------------------------
// Tolerance for a CUDA result against the CPU one: the two paths round in different orders, so
// bf16/f16 get their own rounding step and f32 a little more than one ulp; `tf32` widens f32.
inline double cuda_rtol(DType t, bool tf32 = false) {
  switch (t) {
    case DType::f64: return 1e-10;
    case DType::f32: return tf32 ? 3e-4 : 1e-5;
    case DType::bf16: return 1e-2;
    case DType::f16: return 2e-3;
    default: return 0;
  }
}

// An uninitialised CUDA tensor filled with NaN (floats) or 0x5A.. patterns (integers), so a
// kernel that skips an element cannot pass by reading stale zeros.
inline Tensor poisoned(const Shape& shape, DType dt, Device device = Device::cuda()) {
  Tensor t = empty(shape, dt, device);
  t.fill_(is_floating(dt) ? std::nan("") : (dt == DType::b8 ? 1.0 : 90.0));
  return t;
}

// Copies a CPU input to the device; `strided` returns a non-contiguous view with the same values
// (the data is stored transposed in its last two dims, or with a step of 2 for 1-d tensors).
inline Tensor to_cuda(const Tensor& cpu, bool strided = false) {
  if (!strided || cpu.numel() < 2) return cpu.to(Device::cuda());
  if (cpu.dim() >= 2) {
    Tensor t = cpu.transpose(-1, -2).contiguous().to(Device::cuda());
    return t.transpose(-1, -2);
  }
  Tensor wide = zeros({cpu.numel() * 2}, cpu.dtype()).to(Device::cuda());
  Tensor v = wide.slice(0, 0, cpu.numel() * 2, 2);
  v.copy_(cpu.to(Device::cuda()));
  return v;
}

// `gpu` (on the device) matches the CPU result `cpu` within rtol and atol = rtol (per element
// |a - e| <= atol + rtol |e|), in shape and dtype too.
inline void check_cuda_matches(const Tensor& gpu, const Tensor& cpu, double rtol, double atol = -1,
                               const std::string& what = "") {
  REQUIRE_MESSAGE(gpu.device().is_cuda(), what, ": result is on ", gpu.device().str(), ", expected cuda");
  CHECK_MESSAGE(gpu.shape() == cpu.shape(), what, ": shape ", gpu.shape(), " vs CPU ", cpu.shape());
  CHECK_MESSAGE(gpu.dtype() == cpu.dtype(), what, ": dtype ", dtype_name(gpu.dtype()), " vs CPU ",
                dtype_name(cpu.dtype()));
  check_close(values(gpu.to(Device::cpu())), values(cpu), rtol, atol < 0 ? rtol : atol, what);
}

// `gpu` equals the CPU result bit for bit (data movement, integer math, a max picked from the inputs).
inline void check_cuda_equal(const Tensor& gpu, const Tensor& cpu, const std::string& what = "") {
  check_cuda_matches(gpu, cpu, 0, 0, what);
}

}  // namespace kiln::test

// The expression throws kiln::Error whose message contains every given substring.
#define CHECK_ERROR_CONTAINS(expr, ...)                                                           \
  do {                                                                                            \
    bool kiln_threw_ = false;                                                                     \
    try {                                                                                         \
      (void)(expr);                                                                               \
    } catch (const ::kiln::Error& e) {                                                            \
      kiln_threw_ = true;                                                                         \
      std::string kiln_msg_ = e.what();                                                           \
      for (const char* s : {__VA_ARGS__})                                                         \
        CHECK_MESSAGE(kiln_msg_.find(s) != std::string::npos, "message \"", kiln_msg_,            \
                      "\" lacks \"", s, "\"");                                                    \
    }                                                                                             \
    CHECK_MESSAGE(kiln_threw_, #expr " did not throw kiln::Error");                               \
  } while (0)
