// Triangular masks over the last two dims (batched over the rest): triu keeps elements with
// col - row >= diagonal, tril those with col - row <= diagonal; the others become 0.
#pragma once

#include <kiln/core/tensor.h>

namespace kiln::ops {

// x has at least 2 dims; any dtype; the result is a fresh contiguous tensor.
Tensor triu(const Tensor& x, int64_t diagonal = 0);
Tensor tril(const Tensor& x, int64_t diagonal = 0);

}  // namespace kiln::ops
