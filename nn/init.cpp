// torch.nn.init's initialisers over core's seeded fills (kiln::uniform_ / kiln::normal_).
#include <kiln/nn/init.h>

#include <cmath>

#include <kiln/autograd/grad_mode.h>
#include <kiln/core/factory.h>

namespace kiln::nn::init {

double calculate_gain(Nonlinearity nonlinearity, double param) {
  switch (nonlinearity) {
    case Nonlinearity::linear:
    case Nonlinearity::conv1d:
    case Nonlinearity::conv2d:
    case Nonlinearity::conv3d:
    case Nonlinearity::sigmoid: return 1.0;
    case Nonlinearity::tanh: return 5.0 / 3.0;
    case Nonlinearity::relu: return std::sqrt(2.0);
    case Nonlinearity::leaky_relu: return std::sqrt(2.0 / (1.0 + param * param));
    case Nonlinearity::selu: return 3.0 / 4.0;
  }
  return 1.0;
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor) {
  check_defined(tensor, "calculate_fan_in_and_fan_out", "tensor");
  KILN_CHECK_VALUE(tensor.dim() >= 2, "calculate_fan_in_and_fan_out: needs a tensor with at least 2 dims, got shape ",
                   tensor.shape());
  int64_t receptive = 1;
  for (int64_t d = 2; d < tensor.dim(); ++d) receptive *= tensor.size(d);
  return {tensor.size(1) * receptive, tensor.size(0) * receptive};
}

static int64_t fan_for(const Tensor& tensor, FanMode mode, const char* fn) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  int64_t fan = mode == FanMode::fan_in ? fan_in : fan_out;
  KILN_CHECK_VALUE(fan > 0, fn, ": zero fan for a tensor of shape ", tensor.shape());
  return fan;
}

Tensor uniform_(const Tensor& tensor, double low, double high, Generator& gen) {
  check_defined(tensor, "init::uniform_", "tensor");
  KILN_CHECK_VALUE(low <= high, "init::uniform_: low ", low, " > high ", high);
  NoGradGuard no_grad;
  Tensor t = tensor;
  kiln::uniform_(t, low, high, gen);
  return tensor;
}

Tensor normal_(const Tensor& tensor, double mean, double std, Generator& gen) {
  check_defined(tensor, "init::normal_", "tensor");
  KILN_CHECK_VALUE(std >= 0, "init::normal_: negative std ", std);
  NoGradGuard no_grad;
  Tensor t = tensor;
  kiln::normal_(t, mean, std, gen);
  return tensor;
}

Tensor constant_(const Tensor& tensor, double value) {
  check_defined(tensor, "init::constant_", "tensor");
  NoGradGuard no_grad;
  Tensor t = tensor;
  t.fill_(value);
  return tensor;
}

Tensor zeros_(const Tensor& tensor) { return constant_(tensor, 0.0); }
Tensor ones_(const Tensor& tensor) { return constant_(tensor, 1.0); }

Tensor kaiming_uniform_(const Tensor& tensor, double a, FanMode mode, Nonlinearity nonlinearity, Generator& gen) {
  int64_t fan = fan_for(tensor, mode, "kaiming_uniform_");
  double bound = calculate_gain(nonlinearity, a) * std::sqrt(3.0 / double(fan));
  return uniform_(tensor, -bound, bound, gen);
}

Tensor kaiming_normal_(const Tensor& tensor, double a, FanMode mode, Nonlinearity nonlinearity, Generator& gen) {
  int64_t fan = fan_for(tensor, mode, "kaiming_normal_");
  return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / std::sqrt(double(fan)), gen);
}

Tensor xavier_uniform_(const Tensor& tensor, double gain, Generator& gen) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  KILN_CHECK_VALUE(fan_in + fan_out > 0, "xavier_uniform_: zero fan for a tensor of shape ", tensor.shape());
  double bound = std::sqrt(3.0) * gain * std::sqrt(2.0 / double(fan_in + fan_out));
  return uniform_(tensor, -bound, bound, gen);
}

Tensor xavier_normal_(const Tensor& tensor, double gain, Generator& gen) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  KILN_CHECK_VALUE(fan_in + fan_out > 0, "xavier_normal_: zero fan for a tensor of shape ", tensor.shape());
  return normal_(tensor, 0.0, gain * std::sqrt(2.0 / double(fan_in + fan_out)), gen);
}

}  // namespace kiln::nn::init
