// kiln.h is the user API only: it must not reach the raw kernels (kiln::ops: a user calling
// ops::mul silently gets no gradient), the CPU kernels (kiln::cpu) or the CUDA launchers. Each probe
// below is a fallback overload that loses to any real declaration; this file includes kiln.h and
// nothing internal before the probes are asked, then includes the internals to show the probes
// notice a real declaration.
#include <doctest/doctest.h>

#include <type_traits>
#include <utility>

#include <kiln/kiln.h>

namespace kiln::probe {
struct NotExposed {};
}  // namespace kiln::probe

// Fallbacks: a non-template declaration with the same parameters wins over these.
#define KILN_PROBE(ns, fn)            \
  namespace kiln::ns {                \
  template <class... A>               \
  probe::NotExposed fn(const A&...);  \
  }
KILN_PROBE(ops, add)
KILN_PROBE(ops, matmul)
KILN_PROBE(ops, softmax)
KILN_PROBE(ops, conv2d)
KILN_PROBE(cpu::cap_default, softmax)
KILN_PROBE(cuda, softmax)
KILN_PROBE(cuda, gemm)
#undef KILN_PROBE

namespace {

using kiln::Shape;
using kiln::Tensor;
template <class T>
constexpr bool hidden = std::is_same_v<T, kiln::probe::NotExposed>;

// Which of the probed internals are declared at this point of the file.
struct Seen {
  bool ops_add, ops_matmul, ops_softmax, ops_conv2d, cpu_softmax, cuda_softmax, cuda_gemm;
};
#define KILN_PROBE_SEEN()                                                                                         \
  Seen {                                                                                                          \
    !hidden<decltype(kiln::ops::add(std::declval<Tensor>(), std::declval<Tensor>()))>,                            \
        !hidden<decltype(kiln::ops::matmul(std::declval<Tensor>(), std::declval<Tensor>()))>,                     \
        !hidden<decltype(kiln::ops::softmax(std::declval<Tensor>(), int64_t{}))>,                                 \
        !hidden<decltype(kiln::ops::conv2d(std::declval<Tensor>(), std::declval<Tensor>()))>,                     \
        !hidden<decltype(kiln::cpu::cap_default::softmax(std::declval<const char*>(), std::declval<Tensor>(), int64_t{}, \
                                            bool{}))>,                                                            \
        !hidden<decltype(kiln::cuda::softmax(std::declval<const char*>(), std::declval<Tensor>(), int64_t{},      \
                                             bool{}))>,                                                           \
        !hidden<decltype(kiln::cuda::gemm(std::declval<Tensor>(), std::declval<Tensor>(), std::declval<Tensor>(), \
                                          std::declval<Shape>()))>                                                \
  }

Seen seen_through_kiln_h() { return KILN_PROBE_SEEN(); }

}  // namespace

#include <kiln/core/cpu/softmax.h>
#include <kiln/core/cuda/kernels/matmul.h>
#include <kiln/core/cuda/kernels/softmax.h>
#include <kiln/core/ops/ops.h>

namespace {
Seen seen_with_internals() { return KILN_PROBE_SEEN(); }
}  // namespace

TEST_CASE("kiln.h exposes no raw kernels, CPU kernels or CUDA launchers") {
  const Seen s = seen_through_kiln_h();
  CHECK_FALSE(s.ops_add);
  CHECK_FALSE(s.ops_matmul);
  CHECK_FALSE(s.ops_softmax);
  CHECK_FALSE(s.ops_conv2d);
  CHECK_FALSE(s.cpu_softmax);
  CHECK_FALSE(s.cuda_softmax);
  CHECK_FALSE(s.cuda_gemm);
}

TEST_CASE("the probes see the internals once their headers are included") {
  const Seen s = seen_with_internals();
  CHECK(s.ops_add);
  CHECK(s.ops_matmul);
  CHECK(s.ops_softmax);
  CHECK(s.ops_conv2d);
  CHECK(s.cpu_softmax);
  CHECK(s.cuda_softmax);
  CHECK(s.cuda_gemm);
}

TEST_CASE("kiln.h offers the user API: differentiable ops and the CUDA settings") {
  Tensor a = kiln::ones({2, 2}), b = kiln::ones({2, 2});
  CHECK(kiln::sum(kiln::matmul(a, b)).item() == doctest::Approx(8.0));
  const bool tf32 = kiln::cuda::allow_tf32();
  kiln::cuda::set_allow_tf32(!tf32);
  CHECK(kiln::cuda::allow_tf32() == !tf32);
  kiln::cuda::set_allow_tf32(tf32);
  CHECK(kiln::cuda::device_count() >= 0);
}
