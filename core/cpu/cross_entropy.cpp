// Fused softmax cross-entropy on the CPU, one row per task: max, then sum of exp (16 lanes, so it
// vectorizes), the loss from the target's logit; the backward recomputes exp(x - lse) and writes
// the gradient. 16-bit rows are converted to float one row at a time.
#include <kiln/core/cpu/cross_entropy.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include <kiln/core/cpu/compute.h>
#include <kiln/core/cpu/reduce.h>
#include <kiln/core/cpu/vec_math.h>
#include <kiln/core/dispatch.h>
#include <kiln/core/factory.h>
#include <kiln/core/parallel.h>

namespace kiln::cpu::KILN_CPU_CAP {  // Note [CPU capabilities]

namespace {

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
      const C l = m + std::log(lane_sum<C>(c, [&](int64_t j) { return exp_any(xr[j] - m); }));
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
      for (int64_t j = 0; j < c; ++j) d[j] = static_cast<T>((exp_any(static_cast<C>(xr[j]) - l) - off) * coef);
      const int64_t k = t[i];
      d[k] = static_cast<T>((exp_any(static_cast<C>(xr[k]) - l) - on - off) * coef);
    }
  });
}

}  // namespace

ops::CrossEntropyResult cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                              double label_smoothing) {
  const int64_t rows = logits.size(0), c = logits.size(1);
  ops::check_targets(targets, c, ignore_index);
  const std::vector<int64_t> t = targets.to_vector<int64_t>();
  const Tensor x = logits.contiguous();
  ops::CrossEntropyResult r{empty({rows}, compute_dtype(x.dtype())), empty({rows}, compute_dtype(x.dtype())),
                            Tensor()};
  r.count = scalar_tensor(
      static_cast<double>(std::count_if(t.begin(), t.end(), [&](int64_t v) { return v != ignore_index; })),
      TensorOptions(DType::i64));
  dispatch_floating(x.dtype(), "cross_entropy", [&]<class T>() {
    forward_rows<T>(x.data<T>(), t.data(), r.loss.data<acc_t<T>>(), r.lse.data<acc_t<T>>(), rows, c, ignore_index,
                    label_smoothing);
  });
  return r;
}

Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              int64_t ignore_index, double label_smoothing, double scale, const Tensor& count,
                              int64_t columns) {
  const int64_t rows = logits.size(0), c = logits.size(1);
  if (count.defined()) scale *= 1.0 / count.item();  // as the CUDA kernel: scale * (1 / count), in double
  ops::check_targets(targets, c, ignore_index);      // the row loop writes at the target's column
  const std::vector<int64_t> t = targets.to_vector<int64_t>();
  const Tensor x = logits.contiguous();
  Tensor dx = empty({rows, c}, x.dtype());
  dispatch_floating(x.dtype(), "cross_entropy_backward", [&]<class T>() {
    using C = acc_t<T>;
    const std::vector<C> l = lse.to_vector<C>(), g = grad_loss.to_vector<C>();
    backward_rows<T>(dx.data<T>(), x.data<T>(), t.data(), l.data(), g.data(), g.size() == 1 ? 0 : 1, rows, c,
                     ignore_index, label_smoothing, scale);
  });
  if (columns <= c) return dx;
  Tensor padded = zeros({rows, columns}, x.dtype());  // the gradient of padded logits: zeros past column c
  padded.narrow(1, 0, c).copy_(dx);
  return padded;
}

}  // namespace kiln::cpu::KILN_CPU_CAP
