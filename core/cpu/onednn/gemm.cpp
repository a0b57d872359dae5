// oneDNN's sgemm behind core/cpu/matmul.cpp (gemm.h). oneDNN's GEMM is row-major like Kiln.
#include <kiln/core/cpu/onednn/gemm.h>

#include <kiln/core/cpu/onednn/runtime.h>
#include <kiln/core/cpu/onednn/switch.h>
#include <kiln/core/error.h>

namespace kiln::cpu::onednn {

void sgemm(int64_t m, int64_t n, int64_t k, const float* a, bool a_trans, int64_t lda, const float* b, bool b_trans,
           int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  match_threads();
  const dnnl_status_t st = dnnl_sgemm(a_trans ? 'T' : 'N', b_trans ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb,
                                      accumulate ? 1.0f : 0.0f, c, ldc);
  KILN_CHECK(st == dnnl_success, "matmul: oneDNN's sgemm failed with status ", static_cast<int>(st), " for (", m,
             ", ", k, ") @ (", k, ", ", n, "), lda ", lda, ", ldb ", ldb, ", ldc ", ldc);
  count_onednn_call();
}

}  // namespace kiln::cpu::onednn
