// Differentiable 2-D pooling: max (routing gradients through the argmax indices the raw op
// returns), average and adaptive average, each a raw kiln::ops kernel plus its backward kernel.
#include <kiln/autograd/ops/pool.h>

#include <kiln/autograd/function.h>
#include <kiln/core/ops/pool.h>

namespace kiln {

namespace {

// The three pools share one backward shape: one input, gradient = backward kernel of (g in the
// input's dtype, input shape).
template <class Kernel>
Tensor record_pool(Tensor out, const char* name, const Tensor& x, Kernel kernel) {
  return autograd::record(std::move(out), name, {&x}, [&](const autograd::Needs&) {
    return [kernel](const Tensor& g, const autograd::OpNode& node) {
      const autograd::OpNode::InputInfo& in = node.input_info[0];
      return kernel(g.to(in.dtype), in.shape);
    };
  });
}

}  // namespace

Tensor max_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding) {
  ops::MaxPool2dResult r = ops::max_pool2d(x, kernel, stride, padding);
  // indices (N, C, OH, OW) i64: flat argmax within each input plane
  return record_pool(r.out, "MaxPool2dBackward", x, [indices = r.indices](const Tensor& g, const Shape& shape) {
    return ops::max_pool2d_backward(g, indices, shape);
  });
}

Tensor avg_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding) {
  return record_pool(ops::avg_pool2d(x, kernel, stride, padding), "AvgPool2dBackward", x,
                     [kernel, stride, padding](const Tensor& g, const Shape& shape) {
                       return ops::avg_pool2d_backward(g, shape, kernel, stride, padding);
                     });
}

Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size) {
  return record_pool(ops::adaptive_avg_pool2d(x, output_size), "AdaptiveAvgPool2dBackward", x,
                     [](const Tensor& g, const Shape& shape) { return ops::adaptive_avg_pool2d_backward(g, shape); });
}

}  // namespace kiln
