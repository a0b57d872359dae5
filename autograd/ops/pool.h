// Differentiable 2-D pooling (NCHW): max, average and adaptive average.
#pragma once

#include <optional>

#include <kiln/core/tensor.h>
#include <kiln/core/window.h>

namespace kiln {

///@{
/// Pooling over (N, C, H, W) as torch's F.max_pool2d, F.avg_pool2d and F.adaptive_avg_pool2d; the
/// stride defaults to the kernel size.
Tensor max_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride = std::nullopt, Size2 padding = 0);
Tensor avg_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride = std::nullopt, Size2 padding = 0);
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size);
///@}

}  // namespace kiln
