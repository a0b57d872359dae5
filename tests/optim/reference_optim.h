// The reference optimizers of the optimizer tests, written once: torch.optim.SGD's and AdamW's
// updates (_single_tensor_sgd / _single_tensor_adamw) in plain double, the SGD option combinations
// every SGD test runs, and the trajectory check of an optimizer against its reference.
#pragma once

#include "trajectory.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <ostream>
#include <vector>

namespace kiln::optim {

// For doctest's CAPTURE.
inline std::ostream& operator<<(std::ostream& os, const SGDOptions& o) {
  return os << "SGD(lr " << o.lr() << ", momentum " << o.momentum() << ", dampening " << o.dampening()
            << ", nesterov " << o.nesterov() << ", weight_decay " << o.weight_decay() << ")";
}

inline std::ostream& operator<<(std::ostream& os, const AdamWOptions& o) {
  return os << "AdamW(lr " << o.lr() << ", betas " << o.betas().first << "/" << o.betas().second << ", eps "
            << o.eps() << ", weight_decay " << o.weight_decay() << ", amsgrad " << o.amsgrad() << ")";
}

}  // namespace kiln::optim

namespace kiln::test {

// torch.optim.SGD, in double.
inline void reference_step(const optim::SGDOptions& o, RefParam& r, const std::vector<double>& grad) {
  std::vector<double> d = grad;
  for (size_t j = 0; j < d.size(); ++j) d[j] += o.weight_decay() * r.p[j];
  if (o.momentum() != 0) {
    auto it = r.state.find("momentum_buffer");
    if (it == r.state.end()) {
      it = r.state.emplace("momentum_buffer", d).first;
    } else {
      for (size_t j = 0; j < d.size(); ++j)
        it->second[j] = o.momentum() * it->second[j] + (1 - o.dampening()) * d[j];
    }
    for (size_t j = 0; j < d.size(); ++j) d[j] = o.nesterov() ? d[j] + o.momentum() * it->second[j] : it->second[j];
  }
  for (size_t j = 0; j < d.size(); ++j) r.p[j] -= o.lr() * d[j];
}

// torch.optim.AdamW, in double. r.step is the count before this update.
inline void reference_step(const optim::AdamWOptions& o, RefParam& r, const std::vector<double>& grad) {
  const size_t n = grad.size();
  const auto [b1, b2] = o.betas();
  auto& m = r.state["exp_avg"];
  auto& v = r.state["exp_avg_sq"];
  auto& vmax = r.state["max_exp_avg_sq"];
  m.resize(n, 0.0);
  v.resize(n, 0.0);
  vmax.resize(n, 0.0);
  const double t = static_cast<double>(r.step + 1);
  const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
  for (size_t j = 0; j < n; ++j) {
    r.p[j] *= 1 - o.lr() * o.weight_decay();
    m[j] = b1 * m[j] + (1 - b1) * grad[j];
    v[j] = b2 * v[j] + (1 - b2) * grad[j] * grad[j];
    vmax[j] = std::max(vmax[j], v[j]);
    const double second = o.amsgrad() ? vmax[j] : v[j];
    const double denom = std::sqrt(second) / std::sqrt(bc2) + o.eps();
    r.p[j] -= o.lr() / bc1 * m[j] / denom;
  }
}

// Every valid combination of momentum {0, 0.9}, dampening {0, 0.3}, Nesterov and weight decay
// {0, 0.05}, at lr 0.1 (Nesterov needs momentum and no dampening; dampening needs momentum).
inline std::vector<optim::SGDOptions> sgd_option_cases() {
  std::vector<optim::SGDOptions> cases;
  for (double momentum : {0.0, 0.9})
    for (double dampening : {0.0, 0.3})
      for (bool nesterov : {false, true})
        for (double wd : {0.0, 0.05}) {
          if (nesterov && (momentum == 0 || dampening != 0)) continue;
          if (momentum == 0 && dampening != 0) continue;
          cases.push_back(optim::SGDOptions(0.1).momentum(momentum).dampening(dampening).nesterov(nesterov)
                              .weight_decay(wd));
        }
  return cases;
}

// Ten steps of `Optimizer` over two groups, one with `first` and one with `first` at lr
// `second_lr`, against reference_step: run_trajectory's checks.
template <class Optimizer, class Options>
void check_against_reference(DType dt, const Options& first, double second_lr, double rtol, double atol) {
  const Options second = Options(first).lr(second_lr);
  run_trajectory(
      {{{3, 4}, {5}}, {{2, 3}}}, dt,
      [&](std::vector<std::vector<Tensor>> p) {
        return std::make_unique<Optimizer>(std::vector<typename Optimizer::Group>{{p[0], first}, {p[1], second}});
      },
      [&](size_t g, RefParam& r, const std::vector<double>& grad) { reference_step(g == 0 ? first : second, r, grad); },
      rtol, atol);
}

}  // namespace kiln::test
