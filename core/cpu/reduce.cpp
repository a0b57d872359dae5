// The reductions of core/ops/reduce.h on the CPU, over the (outer, n, inner) blocks the front plans:
// floating sums, means, variances in double (rounded once to the dtype), integer sums in i64, and
// the extrema with their positions, all through the deterministic drivers of core/cpu/reduce.h.
#include <kiln/core/cpu/reduce.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include <kiln/core/dispatch.h>

namespace kiln::cpu::KILN_CPU_CAP {  // Note [CPU capabilities]

namespace {

// The sums of each (outer, inner) position of src (T) in double.
template <class T>
std::vector<double> double_sums(const T* src, int64_t outer, int64_t n, int64_t inner) {
  std::vector<double> acc(static_cast<size_t>(outer * inner));
  auto as_double = [](T v, int64_t) { return static_cast<double>(static_cast<acc_t<T>>(v)); };
  cpu::sum_reduce<double>(src, outer, n, inner, acc.data(), as_double);
  return acc;
}

// out[k] = acc[k] * scale (square-rooted when `take_sqrt`), rounded once to T.
template <class T>
void store(const std::vector<double>& acc, double scale, bool take_sqrt, const Tensor& out) {
  T* o = out.data<T>();
  for (size_t k = 0; k < acc.size(); ++k) {
    double v = acc[k] * scale;
    o[k] = static_cast<T>(static_cast<acc_t<T>>(take_sqrt ? std::sqrt(v) : v));
  }
}

}  // namespace

void sum_reduce(const char* op, const Tensor& src, int64_t outer, int64_t n, int64_t inner, double scale,
                const Tensor& out) {
  dispatch_floating(src.dtype(), op, [&]<class T>() {
    store<T>(double_sums(static_cast<const T*>(src.data_ptr()), outer, n, inner), scale, false, out);
  });
}

void integer_sum_reduce(const char* op, const Tensor& src, int64_t outer, int64_t n, int64_t inner,
                        const Tensor& out) {
  dispatch_all(src.dtype(), op, [&]<class T>() {
    if constexpr (!std::is_floating_point_v<acc_t<T>>) {
      cpu::sum_reduce<int64_t>(static_cast<const T*>(src.data_ptr()), outer, n, inner, out.data<int64_t>(),
                          [](T v, int64_t) { return static_cast<int64_t>(v); });
    }
  });
}

void var_reduce(const char* op, const Tensor& src, int64_t outer, int64_t n, int64_t inner, int64_t correction,
                bool take_sqrt, const Tensor& out) {
  dispatch_floating(src.dtype(), op, [&]<class T>() {
    const T* x = static_cast<const T*>(src.data_ptr());
    std::vector<double> mean = double_sums(x, outer, n, inner);
    const double inv_n = 1.0 / static_cast<double>(n);
    for (double& m : mean) m *= inv_n;
    std::vector<double> sq(mean.size());
    cpu::sum_reduce<double>(x, outer, n, inner, sq.data(), [&](T v, int64_t k) {
      double d = static_cast<double>(static_cast<acc_t<T>>(v)) - mean[k];
      return d * d;
    });
    store<T>(sq, 1.0 / static_cast<double>(std::max<int64_t>(n - correction, 0)), take_sqrt, out);
  });
}

void extremum_reduce(const char* op, const Tensor& src, int64_t outer, int64_t n, int64_t inner, bool max,
                     const Tensor& values, const Tensor& indices) {
  dispatch_numeric(src.dtype(), op, [&]<class T>() {
    using C = acc_t<T>;
    std::vector<Best<C>> best(static_cast<size_t>(outer * inner));
    const T* x = static_cast<const T*>(src.data_ptr());
    if (max) cpu::extremum_reduce<true, C>(x, outer, n, inner, best.data());
    else cpu::extremum_reduce<false, C>(x, outer, n, inner, best.data());
    if (values.defined()) {
      T* v = values.data<T>();
      for (size_t k = 0; k < best.size(); ++k) v[k] = static_cast<T>(best[k].value);
    }
    if (indices.defined()) {
      int64_t* ix = indices.data<int64_t>();
      for (size_t k = 0; k < best.size(); ++k) ix[k] = best[k].index;
    }
  });
}

}  // namespace kiln::cpu::KILN_CPU_CAP
