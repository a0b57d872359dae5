// Helpers for optimizer trajectory tests: parameters in groups, made-up gradients set with
// set_grad, and a loop that steps a Kiln optimizer and a plain double reference side by side.
#pragma once

#include "test_util.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kiln::test {

// A reference parameter: its values and its state buffers, all in double.
struct RefParam {
  std::vector<double> p;
  std::map<std::string, std::vector<double>> state;
  int64_t step = 0;
};

// The gradient of parameter `k` (counting over all groups) at step `s`; some steps leave a
// parameter without a gradient (it must then be skipped: neither it nor its state moves).
inline bool has_grad(int64_t s, size_t k) { return !(k == 1 && s % 4 == 2); }
inline Tensor make_grad(const Shape& shape, DType dt, int64_t s, size_t k) {
  return random(shape, dt, 1000 + 37 * static_cast<uint64_t>(s) + k, -1.5, 1.5);
}

// Runs `steps` steps of the optimizer made by `make` over parameters shaped `shapes` (one list
// per group), and of `ref_step(group, param, grad)`; compares every parameter after every step.
inline void run_trajectory(const std::vector<std::vector<Shape>>& shapes, DType dt,
                           const std::function<std::unique_ptr<optim::Optimizer>(std::vector<std::vector<Tensor>>)>& make,
                           const std::function<void(size_t, RefParam&, const std::vector<double>&)>& ref_step,
                           double rtol, double atol, int64_t steps = 10) {
  std::vector<std::vector<Tensor>> params;
  std::vector<std::vector<RefParam>> refs;
  size_t k = 0;
  for (const auto& group : shapes) {
    params.emplace_back();
    refs.emplace_back();
    for (const Shape& s : group) {
      Tensor p = random(s, dt, 7 + k++);
      p.requires_grad_();
      params.back().push_back(p);
      refs.back().push_back(RefParam{values(p), {}, 0});
    }
  }
  auto opt = make(params);
  for (int64_t s = 0; s < steps; ++s) {
    k = 0;
    for (size_t g = 0; g < params.size(); ++g)
      for (size_t i = 0; i < params[g].size(); ++i, ++k) {
        if (!has_grad(s, k)) {
          params[g][i].set_grad(Tensor());
          continue;
        }
        Tensor grad = make_grad(params[g][i].shape(), dt, s, k);
        params[g][i].set_grad(grad);
        ref_step(g, refs[g][i], values(grad));
        ++refs[g][i].step;
      }
    opt->step();
    for (size_t g = 0; g < params.size(); ++g)
      for (size_t i = 0; i < params[g].size(); ++i) {
        const std::string what = "step " + std::to_string(s) + " group " + std::to_string(g) + " param " +
                                 std::to_string(i) + " (" + dtype_name(dt) + ")";
        check_close(params[g][i], refs[g][i].p, rtol, atol, what);
        CHECK_MESSAGE(opt->state(g, i).step == refs[g][i].step, what, ": state step");
      }
  }
}

}  // namespace kiln::test
