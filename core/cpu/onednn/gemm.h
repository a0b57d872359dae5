// f32 GEMM through oneDNN's sgemm (the fast path of core/cpu/matmul.cpp's products when
// onednn_enabled()): row-major C (m, n) = op(A) @ op(B), or C += op(A) @ op(B) when accumulating.
// op(A) is A (m, k) with row stride lda, or when a_trans the transpose of A (k, m) with row stride
// lda (likewise B). Outside a parallel region it runs Kiln's thread count (Note [oneDNN threads]).
#pragma once

#include <cstdint>

namespace kiln::cpu::onednn {

void sgemm(int64_t m, int64_t n, int64_t k, const float* a, bool a_trans, int64_t lda, const float* b, bool b_trans,
           int64_t ldb, float* c, int64_t ldc, bool accumulate);

}  // namespace kiln::cpu::onednn
