// Parameter initialisers with torch.nn.init's names, fan computations and gains. Each fills the
// tensor in place under NoGradGuard (so it works on parameters that require grad), draws from the
// given Generator (seeded: same seed, same values) and returns the same handle.
#pragma once

#include <cstdint>
#include <utility>

#include <kiln/core/generator.h>
#include <kiln/core/tensor.h>

namespace kiln::nn::init {

enum class Nonlinearity { linear, conv1d, conv2d, conv3d, sigmoid, tanh, relu, leaky_relu, selu };
enum class FanMode { fan_in, fan_out };

/// torch.nn.init.calculate_gain: 1 (linear, conv, sigmoid), 5/3 (tanh), sqrt(2) (relu),
/// sqrt(2 / (1 + slope^2)) (leaky_relu, `param` = slope, default 0.01), 3/4 (selu).
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);
/// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field (needs dim >= 2).
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor);

Tensor uniform_(const Tensor& tensor, double low = 0.0, double high = 1.0, Generator& gen = default_generator());
Tensor normal_(const Tensor& tensor, double mean = 0.0, double std = 1.0, Generator& gen = default_generator());
Tensor constant_(const Tensor& tensor, double value);
Tensor zeros_(const Tensor& tensor);
Tensor ones_(const Tensor& tensor);

/// He init: bound = gain * sqrt(3 / fan) (uniform), std = gain / sqrt(fan) (normal), with
/// gain = calculate_gain(nonlinearity, a) and fan chosen by `mode`.
Tensor kaiming_uniform_(const Tensor& tensor, double a = 0.0, FanMode mode = FanMode::fan_in,
                        Nonlinearity nonlinearity = Nonlinearity::leaky_relu, Generator& gen = default_generator());
Tensor kaiming_normal_(const Tensor& tensor, double a = 0.0, FanMode mode = FanMode::fan_in,
                       Nonlinearity nonlinearity = Nonlinearity::leaky_relu, Generator& gen = default_generator());
/// Glorot init: std = gain * sqrt(2 / (fan_in + fan_out)); uniform bound = sqrt(3) * std.
Tensor xavier_uniform_(const Tensor& tensor, double gain = 1.0, Generator& gen = default_generator());
Tensor xavier_normal_(const Tensor& tensor, double gain = 1.0, Generator& gen = default_generator());

}  // namespace kiln::nn::init

namespace kiln::nn {
/// The generator a layer's options named, or the process default (how layers pick where to draw).
inline Generator& generator_or_default(Generator* gen) { return gen ? *gen : default_generator(); }
}  // namespace kiln::nn
