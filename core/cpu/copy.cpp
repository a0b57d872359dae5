// Dtype conversion and fill on the CPU, mapped by cpu::map_kernel (core/cpu/loops.h): one load,
// one conversion and one store per element, vectorized for contiguous runs.
#include <kiln/core/cpu/copy.h>

#include <cstring>
#include <type_traits>

#include <kiln/core/cpu/loops.h>
#include <kiln/core/dispatch.h>

namespace kiln::cpu::KILN_CPU_CAP {  // Note [CPU capabilities]

void copy(const Tensor& dst, const Tensor& src) {
  dispatch_all(dst.dtype(), "copy_", [&]<class D>() {
    dispatch_all(src.dtype(), "copy_", [&]<class S>() {
      if constexpr (std::is_same_v<D, S>) {
        if (dst.is_contiguous() && src.is_contiguous()) {
          std::memcpy(dst.data_ptr(), src.data_ptr(), dst.nbytes());
          return;
        }
      }
      map_kernel<D, S>(dst, {&src}, [](auto x) { return x; });
    });
  });
}

void fill(const Tensor& t, double value) {
  dispatch_all(t.dtype(), "fill_", [&]<class T>() {
    const acc_t<T> v = formulas::convert<acc_t<T>>(value);  // Note [Conversion to u8]
    map_kernel<T>(t, {}, [v]() { return v; });
  });
}

}  // namespace kiln::cpu::KILN_CPU_CAP
