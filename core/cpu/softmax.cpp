// softmax / log_softmax and their backward on the CPU (core/ops/softmax.cpp checks, then calls
// these). The input is viewed as (outer, n, inner) with n the softmax dim. inner == 1 (the last
// dim) runs one row per task in three passes: max, exp + sum (writing exp), scale; the loops keep
// 16 lanes so they vectorize. inner > 1 walks runs of columns, vectorized across them.
#include <kiln/core/cpu/softmax.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include <kiln/core/cpu/reduce.h>
#include <kiln/core/cpu/vec_math.h>
#include <kiln/core/dispatch.h>
#include <kiln/core/factory.h>
#include <kiln/core/formulas.h>

namespace kiln::cpu::KILN_CPU_CAP {  // Note [CPU capabilities]

namespace {

template <class C>
inline C max_of(C a, C b) { return a > b ? a : b; }

// Row kernels in the compute type C; in[k] and y are (n,). y may alias in[0] (16-bit rows run in a
// float buffer in place).
template <class C, bool Log>
void softmax_row(const std::array<const C*, 1>& in, C* y, int64_t n) {
  const C* x = in[0];
  const C m = row_max(x, n);
  if constexpr (Log) {
    const C lse = m + std::log(lane_sum<C>(n, [&](int64_t i) { return cpu::exp_any(x[i] - m); }));
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] - lse;
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = cpu::exp_any(x[i] - m);
    const C s = lane_sum<C>(n, [&](int64_t i) { return y[i]; });
    const C inv = C(1) / s;
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  }
}

template <class C, bool Log>
void softmax_backward_row(const std::array<const C*, 2>& in, C* gi, int64_t n) {
  const C* g = in[0];
  const C* y = in[1];
  const C s = lane_sum<C>(n, [&](int64_t i) { return formulas::softmax_grad_term<Log>(g[i], y[i]); });
  for (int64_t i = 0; i < n; ++i) gi[i] = formulas::softmax_grad<VecMath, Log>(g[i], y[i], s);
}

// Runs row(in, out, n) over `rows` contiguous rows in parallel, in C = acc_t<T>; 16-bit rows
// are converted through a per-task float buffer.
template <class T, int K, class Row>
void for_each_row(int64_t rows, int64_t n, const std::array<const T*, K>& in, T* out, Row row) {
  using C = acc_t<T>;
  parallel_for(0, rows, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(n, 1)), [&](int64_t lo, int64_t hi) {
    if constexpr (std::is_same_v<T, C>) {
      for (int64_t r = lo; r < hi; ++r) {
        std::array<const C*, K> p;
        for (int k = 0; k < K; ++k) p[k] = in[k] + r * n;
        row(p, out + r * n, n);
      }
    } else {
      std::vector<C> buf(static_cast<size_t>(K * n));
      for (int64_t r = lo; r < hi; ++r) {
        std::array<const C*, K> p;
        for (int k = 0; k < K; ++k) {
          C* b = buf.data() + k * n;
          const T* src = in[k] + r * n;
          for (int64_t i = 0; i < n; ++i) b[i] = static_cast<C>(src[i]);
          p[k] = b;
        }
        C* o = buf.data();  // row kernels may write over their first input
        row(p, o, n);
        T* dst = out + r * n;
        for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(o[i]);
      }
    }
  });
}

// The same computations down a dim with inner > 1: each task owns a run of m <= 256 columns.
template <class T, bool Log>
void softmax_columns(const T* x, T* y, int64_t outer, int64_t n, int64_t inner) {
  using C = acc_t<T>;
  cpu::for_each_column_run(outer, n, inner, [&](int64_t o, int64_t i0, int64_t m) {
    C mx[cpu::kReduceColumns], s[cpu::kReduceColumns];
    const T* xb = x + o * n * inner + i0;
    T* yb = y + o * n * inner + i0;
    for (int64_t i = 0; i < m; ++i) mx[i] = -std::numeric_limits<C>::infinity(), s[i] = 0;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < m; ++i) mx[i] = max_of(static_cast<C>(xb[r * inner + i]), mx[i]);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < m; ++i) s[i] += cpu::exp_any(static_cast<C>(xb[r * inner + i]) - mx[i]);
    for (int64_t i = 0; i < m; ++i) s[i] = Log ? mx[i] + std::log(s[i]) : C(1) / s[i];
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < m; ++i) {
        C v = static_cast<C>(xb[r * inner + i]);
        yb[r * inner + i] = static_cast<T>(formulas::softmax_from_stats<VecMath, Log>(v, mx[i], s[i]));
      }
  });
}

template <class T, bool Log>
void softmax_backward_columns(const T* g, const T* y, T* gi, int64_t outer, int64_t n, int64_t inner) {
  using C = acc_t<T>;
  cpu::for_each_column_run(outer, n, inner, [&](int64_t o, int64_t i0, int64_t m) {
    C s[cpu::kReduceColumns] = {};
    const int64_t base = o * n * inner + i0;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < m; ++i) {
        int64_t k = base + r * inner + i;
        s[i] += formulas::softmax_grad_term<Log>(static_cast<C>(g[k]), static_cast<C>(y[k]));
      }
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < m; ++i) {
        int64_t k = base + r * inner + i;
        C gv = static_cast<C>(g[k]), yv = static_cast<C>(y[k]);
        gi[k] = static_cast<T>(formulas::softmax_grad<VecMath, Log>(gv, yv, s[i]));
      }
  });
}

}  // namespace

Tensor softmax(const char* op, const Tensor& x, int64_t dim, bool log) {
  const formulas::DimSplit l = formulas::split_at(x.shape(), dim);
  Tensor in = x.contiguous();
  Tensor out = empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), op, [&]<class T>() {
    const T* xp = in.data<T>();
    T* yp = out.data<T>();
    dispatch_bool(log, [&]<bool Log>() {
      if (l.inner == 1)
        for_each_row<T, 1>(l.outer, l.n, {xp}, yp, softmax_row<acc_t<T>, Log>);
      else
        softmax_columns<T, Log>(xp, yp, l.outer, l.n, l.inner);
    });
  });
  return out;
}

Tensor softmax_backward(const char* op, const Tensor& grad_out, const Tensor& out, int64_t dim, bool log) {
  const formulas::DimSplit l = formulas::split_at(out.shape(), dim);
  Tensor g = grad_out.contiguous(), y = out.contiguous();
  Tensor gi = empty(out.shape(), out.dtype());
  dispatch_floating(out.dtype(), op, [&]<class T>() {
    const T* gp = g.data<T>();
    const T* yp = y.data<T>();
    T* gip = gi.data<T>();
    dispatch_bool(log, [&]<bool Log>() {
      if (l.inner == 1)
        for_each_row<T, 2>(l.outer, l.n, {gp, yp}, gip, softmax_backward_row<acc_t<T>, Log>);
      else
        softmax_backward_columns<T, Log>(gp, yp, gip, l.outer, l.n, l.inner);
    });
  });
  return gi;
}

}  // namespace kiln::cpu::KILN_CPU_CAP
