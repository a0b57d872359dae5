// CifarCnn (Note [CifarCnn] in cifar_cnn.h): conv groups, global pool and scaled head.
#include <kiln/models/cifar_cnn.h>

#include <sstream>

#include <kiln/autograd/ops/elementwise.h>
#include <kiln/autograd/ops/pool.h>
#include <kiln/autograd/ops/reduce.h>

namespace kiln::models {

CifarConvGroup::CifarConvGroup(int64_t in_channels, int64_t out_channels, const CifarCnnConfig& config,
                               Generator& gen) {
  auto bn = nn::BatchNormOptions(out_channels).momentum(config.bn_momentum_).eps(config.bn_eps_);
  conv1 = register_module(
      "conv1", std::make_shared<nn::Conv2d>(
                   nn::Conv2dOptions(in_channels, out_channels, 3).padding(1).bias(false).generator(gen)));
  norm1 = register_module("norm1", std::make_shared<nn::BatchNorm2d>(bn));
  conv2 = register_module(
      "conv2", std::make_shared<nn::Conv2d>(
                   nn::Conv2dOptions(out_channels, out_channels, 3).padding(1).bias(false).generator(gen)));
  norm2 = register_module("norm2", std::make_shared<nn::BatchNorm2d>(bn));
  act = register_module("act", std::make_shared<nn::GELU>());
}

Tensor CifarConvGroup::forward(const Tensor& x) {
  Tensor h = conv1->forward(x);
  h = kiln::max_pool2d(h, 2);
  h = act->forward(norm1->forward(h));
  h = conv2->forward(h);
  return act->forward(norm2->forward(h));
}

CifarCnn::CifarCnn(const CifarCnnConfig& config, Generator& gen) : config_(config) {
  KILN_CHECK(!config.widths_.empty(), "CifarCnn: widths must name at least one group");
  for (int64_t w : config.widths_) KILN_CHECK(w > 0, "CifarCnn: every width must be positive, got ", w);
  KILN_CHECK(config.in_channels_ > 0 && config.num_classes_ > 0, "CifarCnn: in_channels (", config.in_channels_,
             ") and num_classes (", config.num_classes_, ") must be positive");
  groups = register_module("groups", std::make_shared<nn::ModuleList>());
  int64_t in = config.in_channels_;
  for (int64_t w : config.widths_) {
    groups->push_back(std::make_shared<CifarConvGroup>(in, w, config, gen));
    in = w;
  }
  head = register_module("head", std::make_shared<nn::Linear>(
                                     nn::LinearOptions(in, config.num_classes_).bias(false).generator(gen)));
}

CifarCnn::CifarCnn(const CifarCnnConfig& config) : CifarCnn(config, default_generator()) {}

Tensor CifarCnn::forward(const Tensor& images) {
  check_defined(images, "CifarCnn::forward");
  const int64_t div = int64_t{1} << config_.widths_.size();
  KILN_CHECK(images.dim() == 4 && images.size(1) == config_.in_channels_ && images.size(2) % div == 0 &&
                 images.size(3) % div == 0 && images.size(2) > 0 && images.size(3) > 0,
             "CifarCnn: expected images (N, ", config_.in_channels_, ", H, W) with H and W multiples of ", div,
             ", got ", images.shape());
  Tensor h = images;
  for (size_t i = 0; i < groups->size(); ++i) h = nn::call(*groups->at<CifarConvGroup>(i), h);  // forward hooks: FSDP units
  // Global pool over H and W: (N, C, h, w) -> (N, C).
  h = config_.pool_ == CifarPool::max ? kiln::amax(h, {2, 3}) : kiln::mean(h, {2, 3});
  Tensor logits = head->forward(h);
  return config_.head_scale_ == 1.0 ? logits : kiln::mul(logits, config_.head_scale_);
}

std::string CifarCnn::extra_repr() const {
  std::ostringstream os;
  os << "widths=[";
  for (size_t i = 0; i < config_.widths_.size(); ++i) os << (i ? ", " : "") << config_.widths_[i];
  os << "], num_classes=" << config_.num_classes_ << ", pool=" << (config_.pool_ == CifarPool::max ? "max" : "avg")
     << ", head_scale=" << config_.head_scale_;
  return os.str();
}

}  // namespace kiln::models
