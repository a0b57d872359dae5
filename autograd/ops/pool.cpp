// Differentiable 2-D pooling: max (routing gradients through the argmax indices the raw op
// returns), average and adaptive average, each a raw kiln::ops kernel plus its backward kernel.
#include <kiln/autograd/ops/conv.h>

#include <kiln/autograd/function.h>
#include <kiln/core/ops/pool.h>

namespace kiln {

namespace {

// Shared shape of the three nodes: one input, gradient = backward kernel of (grad, input shape).
class PoolBackward : public autograd::OpNode {
 public:
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    if (!grads[0].defined() || !needs_input_grad(0)) return {Tensor()};
    return {input_grad(0, backward(grads[0].to(input_info[0].dtype), input_info[0].shape))};
  }

 protected:
  virtual Tensor backward(const Tensor& g, const Shape& input_shape) const = 0;
};

class MaxPool2dBackward final : public PoolBackward {
 public:
  Tensor indices;  // (N, C, OH, OW) i64: flat argmax within each input plane
  std::string name() const override { return "MaxPool2dBackward"; }
  void release_saved() override { indices = Tensor(); }

 protected:
  Tensor backward(const Tensor& g, const Shape& input_shape) const override {
    return ops::max_pool2d_backward(g, indices, input_shape);
  }
};

class AvgPool2dBackward final : public PoolBackward {
 public:
  AvgPool2dBackward(Size2 kernel, std::optional<Size2> stride, Size2 padding)
      : kernel_(kernel), stride_(stride), padding_(padding) {}
  std::string name() const override { return "AvgPool2dBackward"; }

 protected:
  Tensor backward(const Tensor& g, const Shape& input_shape) const override {
    return ops::avg_pool2d_backward(g, input_shape, kernel_, stride_, padding_);
  }

 private:
  Size2 kernel_;
  std::optional<Size2> stride_;
  Size2 padding_;
};

class AdaptiveAvgPool2dBackward final : public PoolBackward {
 public:
  std::string name() const override { return "AdaptiveAvgPool2dBackward"; }

 protected:
  Tensor backward(const Tensor& g, const Shape& input_shape) const override {
    return ops::adaptive_avg_pool2d_backward(g, input_shape);
  }
};

}  // namespace

Tensor max_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding) {
  ops::MaxPool2dResult r = ops::max_pool2d(x, kernel, stride, padding);
  if (auto node = autograd::make_node<MaxPool2dBackward>({&x})) {
    node->indices = r.indices;
    autograd::set_history(r.out, node);
  }
  return r.out;
}

Tensor avg_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding) {
  Tensor out = ops::avg_pool2d(x, kernel, stride, padding);
  if (auto node = autograd::make_node<AvgPool2dBackward>({&x}, kernel, stride, padding))
    autograd::set_history(out, node);
  return out;
}

Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size) {
  Tensor out = ops::adaptive_avg_pool2d(x, output_size);
  if (auto node = autograd::make_node<AdaptiveAvgPool2dBackward>({&x})) autograd::set_history(out, node);
  return out;
}

}  // namespace kiln
