// Fused softmax cross-entropy: the fronts (checks, then CUDA tensors to core/cuda/kernels/cross_entropy.cu)
// and the CPU kernels, one row per task: max, then sum of exp (16 lanes, so it vectorizes), the
// loss from the target's logit; the backward recomputes exp(x - lse) and writes the gradient.
#include <kiln/core/ops/cross_entropy.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <kiln/core/cpu/reduce.h>
#include <kiln/core/cpu/vec_math.h>
#include <kiln/core/cuda/kernels/cross_entropy.h>
#include <kiln/core/cuda/runtime/deferred_check.h>
#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/dispatch.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/common.h>
#include <kiln/core/parallel.h>

namespace kiln::ops {

namespace {

using cpu::kLanes;
using cpu::lane_sum;

// Shapes and dtypes both ops share: logits (N, C), targets (N,).
void check_args(const char* op, const Tensor& logits, const Tensor& targets, double label_smoothing) {
  check_defined(logits, op, "logits");
  check_defined(targets, op, "targets");
  KILN_CHECK(logits.dim() == 2 && logits.size(1) >= 1, op, ": logits must be (N, C) with C >= 1, got shape ",
             logits.shape());
  KILN_CHECK(is_floating(logits.dtype()), op, ": logits must be floating, got ", logits.dtype());
  KILN_CHECK(targets.dtype() == DType::i64 || targets.dtype() == DType::i32, op,
             ": targets must be i64 or i32 class indices, got ", targets.dtype());
  KILN_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0), op, ": targets of shape ", targets.shape(),
             " do not match logits of shape ", logits.shape(), " (expected [", logits.size(0), "])");
  KILN_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, op, ": label_smoothing must be in [0, 1], got ",
             label_smoothing);
}

DType loss_dtype(DType logits) { return logits == DType::f64 ? DType::f64 : DType::f32; }

// max over x[0, n); NaN is skipped (it reappears through exp(x - max)). `v > m ? v : m` is one
// max instruction per 16 lanes.
template <class C>
C row_max(const C* x, int64_t n) {
  C m[kLanes];
  for (int j = 0; j < kLanes; ++j) m[j] = -std::numeric_limits<C>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
  for (; i < n; ++i) m[0] = x[i] > m[0] ? x[i] : m[0];
  C r = m[0];
  for (int j = 1; j < kLanes; ++j) r = m[j] > r ? m[j] : r;
  return r;
}

// Row i of x as C values: x itself for f32 / f64, else converted into buf.
template <class T, class C>
const C* row_as(const T* x, int64_t n, std::vector<C>& buf) {
  if constexpr (std::is_same_v<T, C>) {
    return x;
  } else {
    for (int64_t j = 0; j < n; ++j) buf[j] = static_cast<C>(x[j]);
    return buf.data();
  }
}

template <class T>
void forward_rows(const T* x, const int64_t* t, acc_t<T>* loss, acc_t<T>* lse, int64_t rows, int64_t c,
                  int64_t ignore_index, double ls) {
  using C = acc_t<T>;
  parallel_for(0, rows, std::max<int64_t>(1, kGrainSize / c), [&](int64_t lo, int64_t hi) {
    std::vector<C> buf(std::is_same_v<T, C> ? 0 : static_cast<size_t>(c));
    for (int64_t i = lo; i < hi; ++i) {
      if (t[i] == ignore_index) {
        loss[i] = lse[i] = C(0);
        continue;
      }
      const C* xr = row_as<T, C>(x + i * c, c, buf);
      const C m = row_max(xr, c);
      const C l = m + std::log(lane_sum<C>(c, [&](int64_t j) { return cpu::exp_any(xr[j] - m); }));
      double v = -(1.0 - ls) * static_cast<double>(xr[t[i]] - l);
      if (ls > 0) {
        // sum_c logp[i, c] = sum_c x[i, c] - C * lse
        const double sum_logp = static_cast<double>(lane_sum<C>(c, [&](int64_t j) { return xr[j]; })) -
                                static_cast<double>(c) * static_cast<double>(l);
        v -= ls / static_cast<double>(c) * sum_logp;
      }
      loss[i] = static_cast<C>(v);
      lse[i] = l;
    }
  });
}

template <class T>
void backward_rows(T* dx, const T* x, const int64_t* t, const acc_t<T>* lse, const acc_t<T>* g, int64_t g_stride,
                   int64_t rows, int64_t c, int64_t ignore_index, double ls, double scale) {
  using C = acc_t<T>;
  const C on = static_cast<C>(1.0 - ls), off = static_cast<C>(ls / static_cast<double>(c));
  parallel_for(0, rows, std::max<int64_t>(1, kGrainSize / c), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      T* d = dx + i * c;
      const T* xr = x + i * c;
      if (t[i] == ignore_index) {
        std::fill(d, d + c, static_cast<T>(C(0)));
        continue;
      }
      const C coef = static_cast<C>(static_cast<double>(g[i * g_stride]) * scale);
      const C l = lse[i];
      for (int64_t j = 0; j < c; ++j) d[j] = static_cast<T>((cpu::exp_any(static_cast<C>(xr[j]) - l) - off) * coef);
      const int64_t k = t[i];
      d[k] = static_cast<T>((cpu::exp_any(static_cast<C>(xr[k]) - l) - on - off) * coef);
    }
  });
}

}  // namespace

void throw_bad_target(int64_t value, int64_t row, int64_t classes, int64_t ignore_index, bool late) {
  KILN_FAIL("cross_entropy: target ", value, " at row ", row, " is out of range for ", classes,
             " classes (ignore_index ", ignore_index, ")",
             late ? " (reported late: checked on the device and read at a later host sync, see Note [Deferred device "
                    "checks]; KILN_CUDA_CHECKS=immediate reports it from the op itself)"
                  : "");
  std::abort();  // not reached
}

void check_targets(const Tensor& targets, int64_t classes, int64_t ignore_index) {
  const std::vector<int64_t> t = targets.to_vector<int64_t>();
  for (size_t i = 0; i < t.size(); ++i)
    if (t[i] != ignore_index && (t[i] < 0 || t[i] >= classes)) throw_bad_target(t[i], int64_t(i), classes, ignore_index);
}

CrossEntropyResult cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                         double label_smoothing) {
  const char* op = "cross_entropy";
  check_args(op, logits, targets, label_smoothing);
  if constexpr (cuda::kBuilt)
    if (logits.device().is_cuda() || targets.device().is_cuda()) {
      check_same_device(op, logits, targets);
      Tensor fault;
      CrossEntropyResult r = cuda::cross_entropy_forward(logits, targets, ignore_index, label_smoothing, fault);
      const int64_t classes = logits.size(1);
      cuda::check_fault_record(fault, [classes, ignore_index](int64_t row, int64_t value, bool late) {
        throw_bad_target(value, row, classes, ignore_index, late);
      });
      return r;
    }
  check_cpu(op, {&logits, &targets});
  const int64_t rows = logits.size(0), c = logits.size(1);
  check_targets(targets, c, ignore_index);
  const std::vector<int64_t> t = targets.to_vector<int64_t>();
  const Tensor x = logits.contiguous();
  CrossEntropyResult r{empty({rows}, loss_dtype(x.dtype())), empty({rows}, loss_dtype(x.dtype())), Tensor()};
  r.count = scalar_tensor(
      static_cast<double>(std::count_if(t.begin(), t.end(), [&](int64_t v) { return v != ignore_index; })),
      TensorOptions(DType::i64));
  dispatch_floating(x.dtype(), op, [&]<class T>() {
    forward_rows<T>(x.data<T>(), t.data(), r.loss.data<acc_t<T>>(), r.lse.data<acc_t<T>>(), rows, c, ignore_index,
                    label_smoothing);
  });
  return r;
}

Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              int64_t ignore_index, double label_smoothing, double scale, const Tensor& count) {
  const char* op = "cross_entropy_backward";
  check_args(op, logits, targets, label_smoothing);
  check_defined(grad_loss, op, "grad_loss");
  check_defined(lse, op, "lse");
  const int64_t rows = logits.size(0), c = logits.size(1);
  KILN_CHECK(is_floating(grad_loss.dtype()) && (grad_loss.numel() == rows || grad_loss.numel() == 1), op,
             ": grad_loss must be floating with ", rows, " elements or one, got ", grad_loss.dtype(), " of shape ",
             grad_loss.shape());
  KILN_CHECK(is_floating(lse.dtype()) && lse.numel() == rows, op, ": lse must be floating with ", rows,
             " elements, got ", lse.dtype(), " of shape ", lse.shape());
  KILN_CHECK(!count.defined() || (count.numel() == 1 && count.dtype() == DType::i64), op,
             ": count must be the forward's one-element i64 count, got ",
             count.defined() ? std::string(dtype_name(count.dtype())) : std::string(), count.defined() ? count.shape() : Shape{});
  if constexpr (cuda::kBuilt)
    if (logits.device().is_cuda()) {
      check_same_device(op, logits, targets);
      check_same_device(op, logits, lse);
      check_same_device(op, logits, grad_loss);
      if (count.defined()) check_same_device(op, logits, count);
      return cuda::cross_entropy_backward(grad_loss, logits, targets, lse, ignore_index, label_smoothing, scale, count);
    }
  check_cpu(op, {&grad_loss, &logits, &targets, &lse});
  if (count.defined()) {
    check_cpu(op, {&count});
    scale *= 1.0 / count.item();  // as the CUDA kernel: scale * (1 / count), in double
  }
  check_targets(targets, c, ignore_index);  // the row loop writes at the target's column
  const std::vector<int64_t> t = targets.to_vector<int64_t>();
  const Tensor x = logits.contiguous();
  Tensor dx = empty({rows, c}, x.dtype());
  dispatch_floating(x.dtype(), op, [&]<class T>() {
    using C = acc_t<T>;
    const std::vector<C> l = lse.to_vector<C>(), g = grad_loss.to_vector<C>();
    backward_rows<T>(dx.data<T>(), x.data<T>(), t.data(), l.data(), g.data(), g.size() == 1 ? 0 : 1, rows, c,
                     ignore_index, label_smoothing, scale);
  });
  return dx;
}

}  // namespace kiln::ops
