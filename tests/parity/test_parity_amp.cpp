// Parity with PyTorch 1.13 for mixed precision (gen_amp.py): GradScaler's decisions (stepped or
// skipped, scale and growth tracker after every update, and the parameters) over a gradient
// sequence with injected inf/NaN, and a linear-gelu-linear-cross_entropy forward and backward
// under bf16 autocast against torch.autocast('cpu', dtype=torch.bfloat16).
#include "parity_util.h"

#include <string>

using namespace kiln;

namespace {

std::string key(const std::string& prefix, int s, int k = -1) {
  return prefix + "." + std::to_string(s) + (k >= 0 ? "." + std::to_string(k) : "");
}

}  // namespace

TEST_CASE("GradScaler decisions match torch's GradScaler on the same gradient sequence") {
  const SafetensorsFile file = test::load_oracle("parity_amp.safetensors");
  const double init_scale = std::stod(file.metadata.at("init_scale"));
  const int64_t interval = std::stoll(file.metadata.at("growth_interval"));
  std::vector<Tensor> params;
  for (int k = 0; file.contains("scaler.init." + std::to_string(k)); ++k)
    params.push_back(file.at("scaler.init." + std::to_string(k)).clone().requires_grad_());
  REQUIRE(params.size() == 2);
  optim::SGD opt(params, optim::SGDOptions(0.1).momentum(0.9));
  optim::GradScaler scaler(optim::GradScalerOptions().init_scale(init_scale).growth_interval(interval));
  int steps = 0, skipped = 0;
  for (int s = 0; file.contains(key("scaler.stepped", s)); ++s, ++steps) {
    CAPTURE(s);
    opt.zero_grad();
    Tensor loss;
    for (size_t k = 0; k < params.size(); ++k) {
      Tensor term = sum(mul(params[k], file.at(key("scaler.grad", s, int(k)))));
      loss = loss.defined() ? add(loss, term) : term;
    }
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    optim::clip_grad_norm(params, 1.0);
    const bool stepped = scaler.step(opt);
    scaler.update();
    skipped += !stepped;
    CHECK(stepped == (file.at(key("scaler.stepped", s)).item() != 0));
    CHECK(scaler.scale_value() == file.at(key("scaler.scale", s)).item());
    CHECK(scaler.growth_tracker() == int64_t(file.at(key("scaler.tracker", s)).item()));
    for (size_t k = 0; k < params.size(); ++k)
      test::check_close(params[k], test::values(file.at(key("scaler.param", s, int(k)))), 1e-5, 1e-6,
                        key("scaler.param", s, int(k)));
  }
  CHECK(steps == 26);
  CHECK(skipped == 6);  // 5 injected inf/NaN gradients plus one that overflows once scaled
}

TEST_CASE("a bf16 autocast forward and backward match torch.autocast('cpu', bfloat16)") {
  const SafetensorsFile file = test::load_oracle("parity_amp.safetensors");
  const Tensor x = file.at("ac.x"), target = file.at("ac.target");
  std::map<std::string, Tensor> w;
  for (const char* n : {"w1", "b1", "w2", "b2"}) w[n] = file.at(std::string("ac.") + n).clone().requires_grad_();
  Tensor logits, loss;
  {
    AutocastGuard guard(DType::bf16);
    logits = linear(gelu(linear(x, w["w1"], w["b1"])), w["w2"], w["b2"]);
    loss = cross_entropy(logits, target);
  }
  CHECK(logits.dtype() == DType::bf16);
  CHECK(loss.dtype() == DType::f32);
  loss.backward();
  // Kiln against the semantics it claims (bf16 inputs, f32 accumulation, one rounding per op),
  // which gen_amp.py writes out without torch's bf16 kernels ("ref.logits"): equal but for a rare
  // one-ulp flip where f32 sums in another order round the other way (one flip in these 40 logits
  // is a relative error of ~6e-4). Measured on every capability: 0.
  const Tensor torch_logits = file.at("ac.logits"), f32_logits = file.at("f32.logits");
  const Tensor ref_logits = file.at("ref.logits");
  REQUIRE(torch_logits.dtype() == DType::bf16);
  const double err_ref = test::rel_err(logits, ref_logits);
  CHECK(err_ref < 1e-3);
  // Against torch.autocast, whose bf16 rounding depends on the CPU: with AVX-512, oneDNN computes
  // GELU in f32 and rounds once (torch == ref, measured bitwise); without it (AMD EPYC Zen 3, or
  // KILN_TORCH_ISA=avx2 anywhere) ATen's bf16 GELU is one bf16 ulp off "f32, round once" in 43% of
  // elements, and the logits differ from ref by 2.38e-3 (15 of 40 logits; torch autocast vs f32:
  // 4.31e-3, ref vs f32: 4.10e-3). The bound covers that rounding, measured on both: Kiln stays
  // within 4e-3 of torch and closer to torch's bf16 than torch's bf16 is to f32.
  const double err = test::rel_err(logits, torch_logits);
  const double torch_vs_ref = test::rel_err(torch_logits, ref_logits);
  const double bf16_vs_f32 = test::rel_err(f32_logits, torch_logits);
  MESSAGE("logits: Kiln vs ref ", err_ref, ", Kiln vs torch autocast ", err, ", torch vs ref ", torch_vs_ref,
          ", torch autocast vs f32 ", bf16_vs_f32);
  CHECK(torch_vs_ref < 3e-3);  // torch's own ISA-dependent rounding: at most ~one ulp in some logits
  CHECK(err < 4e-3);
  CHECK(err < bf16_vs_f32);
  test::check_rel(loss, file.at("ac.loss"), 2e-3, "loss");
  // The gradients differ by torch's bf16 rounding inside its backward (measured up to 0.7%).
  for (const char* n : {"w1", "b1", "w2", "b2"}) {
    CAPTURE(n);
    REQUIRE(w[n].grad().defined());
    CHECK(w[n].grad().dtype() == DType::f32);
    MESSAGE("grad ", std::string(n), ": relative error ", test::rel_err(w[n].grad(), file.at(std::string("ac.grad.") + n)));
    test::check_rel(w[n].grad(), file.at(std::string("ac.grad.") + n), 1.5e-2, std::string("grad ") + n);
  }
}
