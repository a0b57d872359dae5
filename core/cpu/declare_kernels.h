// Declares the kernels of KILN_CPU_KERNELS (an include path, e.g. <kiln/core/kernels/softmax.inc>)
// in each capability's namespace inside kiln::cpu (Note [CPU capabilities]). No #pragma once:
// each backend header includes it once per .inc, after defining KILN_CPU_KERNELS.
#include <kiln/core/cpu/kernel_set.h>

namespace kiln::cpu {
namespace cap_default {
#include KILN_CPU_KERNELS
}  // namespace cap_default
namespace cap_avx2 {
#include KILN_CPU_KERNELS
}  // namespace cap_avx2
namespace cap_avx512 {
#include KILN_CPU_KERNELS
}  // namespace cap_avx512
}  // namespace kiln::cpu

#undef KILN_CPU_KERNELS
