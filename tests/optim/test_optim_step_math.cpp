// The arithmetic the CUDA optimizer and GradScaler kernels run (core/cuda/plan/optim_step_math.h),
// checked on the CPU against the CPU optimizers and GradScaler it transcribes, including the device
// step counting of Note [Device step counts]: a skipped step advances nothing, AdamW's bias
// corrections and SGD's first momentum buffer follow the real updates.
#include "test_util.h"
#include "reference_optim.h"

#include <limits>
#include <map>
#include <string>
#include <vector>

#include <kiln/core/cuda/plan/optim_step_math.h>

using namespace kiln;
namespace math = kiln::cuda::math;

namespace {

// Steps 0 and 3 are "skipped" (a GradScaler found an inf): the CPU optimizer does not step and the
// emulated kernel changes nothing, its step count included.
const std::vector<bool> kSkip = {true, false, false, true, false, false, false, false, false, false, false};

std::vector<double> as_doubles(const std::vector<float>& v) { return {v.begin(), v.end()}; }
std::vector<double> as_doubles(const std::vector<double>& v) { return v; }

template <class T>
std::vector<T> vec_of(const Tensor& t) {
  return t.contiguous().template to_vector<T>();
}

double rtol_for(DType dt) { return dt == DType::f64 ? 1e-13 : 1e-6; }

}  // namespace

TEST_CASE_TEMPLATE("adamw_element over device step counts follows optim::AdamW", T, float, double) {
  const DType dt = dtype_of<T>;
  for (bool amsgrad : {false, true})
    for (double wd : {0.0, 0.1}) {
      CAPTURE(amsgrad);
      CAPTURE(wd);
      const int64_t n = 257;
      Tensor p = test::random({n}, dt, 3);
      p.requires_grad_();
      const auto o = optim::AdamWOptions(2e-2).betas({0.9, 0.99}).eps(1e-8).weight_decay(wd).amsgrad(amsgrad);
      optim::AdamW opt({p}, o);
      std::vector<T> ep = vec_of<T>(p.detach()), em(n, 0), ev(n, 0), emax(n, 0);
      int64_t step = 0;  // the device count
      const auto c = math::adamw_coeffs<T>(o.lr(), 0.9, 0.99, o.eps(), wd);
      for (size_t s = 0; s < kSkip.size(); ++s) {
        Tensor g = test::random({n}, dt, 100 + s, -1.5, 1.5);
        p.set_grad(g);
        if (kSkip[s]) continue;
        opt.step();
        ++step;
        const auto sc = math::adamw_step_coeffs<T>(o.lr(), 0.9, 0.99, static_cast<double>(step));
        const std::vector<T> gv = vec_of<T>(g);
        for (int64_t i = 0; i < n; ++i) {
          if (amsgrad)
            math::adamw_element<T, true>(ep[i], gv[i], em[i], ev[i], emax[i], c, sc);
          else
            math::adamw_element<T, false>(ep[i], gv[i], em[i], ev[i], emax[i], c, sc);
        }
        const std::string what = "step " + std::to_string(s);
        test::check_close(p.detach(), as_doubles(ep), rtol_for(dt), rtol_for(dt), what + " param");
        const optim::ParamState& st = opt.state(0, 0);
        CHECK(st.step == step);
        test::check_close(st.buffers.at("exp_avg"), as_doubles(em), rtol_for(dt), rtol_for(dt), what + " m");
        test::check_close(st.buffers.at("exp_avg_sq"), as_doubles(ev), rtol_for(dt), rtol_for(dt), what + " v");
        if (amsgrad)
          test::check_close(st.buffers.at("max_exp_avg_sq"), as_doubles(emax), rtol_for(dt), rtol_for(dt),
                            what + " vmax");
      }
    }
}

TEST_CASE("adamw_step_coeffs: the bias corrections of update t") {
  const auto s1 = math::adamw_step_coeffs<double>(1e-3, 0.9, 0.999, 1.0);
  CHECK(s1.neg_step_size == doctest::Approx(-1e-3 / 0.1).epsilon(1e-14));
  CHECK(s1.bias_correction2_sqrt == doctest::Approx(std::sqrt(0.001)).epsilon(1e-14));
  const auto s5 = math::adamw_step_coeffs<float>(1e-3, 0.9, 0.999, 5.0);
  CHECK(s5.neg_step_size == static_cast<float>(-(1e-3 / (1.0 - std::pow(0.9, 5.0)))));
  CHECK(s5.bias_correction2_sqrt == static_cast<float>(std::sqrt(1.0 - std::pow(0.999, 5.0))));
}

TEST_CASE_TEMPLATE("sgd_element over device step counts follows optim::SGD for every option combination", T, float,
                   double) {
  const DType dt = dtype_of<T>;
  for (const optim::SGDOptions& o : test::sgd_option_cases()) {
    CAPTURE(o);
    const int64_t n = 131;
    Tensor p = test::random({n}, dt, 5);
    p.requires_grad_();
    optim::SGD opt({p}, o);
    std::vector<T> ep = vec_of<T>(p.detach()), ebuf(n, T(-7));  // a never-read buffer is garbage
    int64_t step = 0;
    bool buffer_exists = false;
    const auto c = math::sgd_coeffs<T>(o.lr(), o.momentum(), o.dampening(), o.weight_decay(), o.nesterov());
    for (size_t s = 0; s < kSkip.size(); ++s) {
      Tensor g = test::random({n}, dt, 200 + s, -1.5, 1.5);
      p.set_grad(g);
      // The front: the buffer is created (fresh) on the first attempted step, skipped or not.
      const bool fresh = o.momentum() != 0 && !buffer_exists;
      buffer_exists = buffer_exists || o.momentum() != 0;
      if (kSkip[s]) continue;
      opt.step();
      ++step;
      const bool first = math::sgd_first_update(fresh, step);
      const std::vector<T> gv = vec_of<T>(g);
      for (int64_t i = 0; i < n; ++i) {
        if (o.momentum() != 0)
          math::sgd_element<T, true>(ep[i], gv[i], ebuf[i], first, c);
        else
          math::sgd_element<T, false>(ep[i], gv[i], ebuf[i], first, c);
      }
      const std::string what = "step " + std::to_string(s);
      test::check_close(p.detach(), as_doubles(ep), rtol_for(dt), rtol_for(dt), what + " param");
      CHECK(opt.state(0, 0).step == step);
      if (o.momentum() != 0)
        test::check_close(opt.state(0, 0).buffers.at("momentum_buffer"), as_doubles(ebuf), rtol_for(dt),
                          rtol_for(dt), what + " buf");
    }
  }
}

TEST_CASE("sgd_first_update") {
  CHECK(math::sgd_first_update(true, 5));   // created for this step (momentum switched on mid-run)
  CHECK(math::sgd_first_update(false, 1));  // first real update; the buffer came from a skipped step
  CHECK_FALSE(math::sgd_first_update(false, 2));
}

TEST_CASE("norm_from_sum and clip_coef are clip_grad_norm's") {
  for (double norm_type : {1.0, 2.0, 3.0, optim::kInfNorm}) {
    CAPTURE(norm_type);
    Tensor p = test::random({50}, DType::f64, 9);
    p.requires_grad_();
    Tensor g = test::random({50}, DType::f64, 10);
    p.set_grad(g);
    const std::vector<double> gv = test::values(g);
    double acc = 0;
    for (double x : gv) acc = std::isinf(norm_type) ? std::max(acc, std::fabs(x)) : acc + std::pow(std::fabs(x), norm_type);
    const double total = math::norm_from_sum(acc, norm_type, std::isinf(norm_type));
    CHECK(optim::clip_grad_norm({p}, 0.5, norm_type) == doctest::Approx(total).epsilon(1e-13));
    const double coef = math::clip_coef(0.5, total);
    std::vector<double> expected = gv;
    for (double& x : expected) x *= coef;
    test::check_close(p.grad(), expected, 1e-14, 1e-15, "clipped");
  }
}

TEST_CASE("update_scale and inv_scale follow GradScaler's CPU update") {
  // found_inf per iteration: growth at every 3rd clean step, backoff on inf, growth to inf refused.
  const std::vector<bool> found = {false, false, false, true, false, false, false, false, false, false, true, false};
  for (double init : {1024.0, 3.0e38}) {
    CAPTURE(init);
    const auto go = optim::GradScalerOptions().init_scale(init).growth_interval(3).backoff_factor(0.25);
    optim::GradScaler s(go);
    Tensor p = test::random({3}, DType::f32, 1);
    p.requires_grad_();
    optim::SGD opt({p}, optim::SGDOptions(0.1));
    float scale = static_cast<float>(init);
    int64_t tracker = 0;
    for (size_t k = 0; k < found.size(); ++k) {
      CAPTURE(k);
      CHECK(math::inv_scale(scale) == static_cast<float>(1.0 / static_cast<double>(static_cast<float>(s.scale_value()))));
      p.set_grad(test::random({3}, DType::f32, 20 + k));
      s.unscale_(opt);
      s.set_found_inf(bool(found[k]));
      s.update();
      math::update_scale(scale, tracker, found[k], go.growth_factor_, go.backoff_factor_, go.growth_interval_);
      CHECK(s.scale_value() == static_cast<double>(scale));
      CHECK(s.growth_tracker() == tracker);
    }
  }
}
