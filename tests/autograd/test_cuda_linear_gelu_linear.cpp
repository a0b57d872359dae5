// linear_gelu_linear on CUDA, where c_fc's bias and GELU run in cuBLASLt's epilogue (Note [Fused
// bias-GELU epilogue]), against the CPU composition: output and every gradient, f32 and bf16
// autocast, with and without biases; and a GPT step's loss and gradients with the switch on and
// off. Label gpu: skipped without a device.
#include "test_util.h"

#include <cmath>

#include "autograd/gelu_form.h"

using namespace kiln;

namespace {

const Device kCuda = Device::cuda();

std::vector<Tensor> run(Device device, bool autocast, bool bias) {
  Tensor x = test::random({4, 8, 64}, DType::f32, 1).to(device).requires_grad_();
  Tensor w1 = test::random({256, 64}, DType::f32, 2, -0.2, 0.2).to(device).requires_grad_();
  Tensor b1 = bias ? test::random({256}, DType::f32, 3).to(device).requires_grad_() : Tensor();
  Tensor w2 = test::random({64, 256}, DType::f32, 4, -0.2, 0.2).to(device).requires_grad_();
  Tensor b2 = bias ? test::random({64}, DType::f32, 5).to(device).requires_grad_() : Tensor();
  Tensor y;
  {
    AutocastGuard guard(DType::bf16, autocast);
    y = device.is_cuda() ? linear_gelu_linear(x, w1, b1, w2, b2)
                         : gelu_linear(linear(x, w1, b1), w2, b2, GeluApproximate::tanh);
  }
  y.backward(test::random(y.shape(), y.dtype(), 6).to(device));
  std::vector<Tensor> out{y.detach().to(DType::f32), x.grad(), w1.grad(), w2.grad()};
  if (bias) {
    out.push_back(b1.grad());
    out.push_back(b2.grad());
  }
  return out;
}

}  // namespace

TEST_CASE("linear_gelu_linear on CUDA (GELU in the epilogue) matches the CPU composition") {
  test::require_cuda();
  const char* names[] = {"y", "dx", "dw1", "dw2", "db1", "db2"};
  for (bool autocast : {false, true})
    for (bool bias : {true, false}) {
      INFO("autocast ", autocast, ", bias ", bias);
      const std::vector<Tensor> gpu = run(kCuda, autocast, bias), cpu = run(Device::cpu(), autocast, bias);
      REQUIRE(gpu.size() == cpu.size());
      const double tol = autocast ? 3e-2 : 2e-3;  // TF32 off: f32 products; bf16: the rounding of pre
      for (size_t i = 0; i < gpu.size(); ++i) test::check_cuda_matches(gpu[i], cpu[i], tol, tol, names[i]);
    }
}

TEST_CASE("cuBLASLt's GELU epilogue computes GPT-2's tanh form, not the erf form") {
  test::require_cuda();
  // pre = x exactly (f32 products, identity weight, zero bias) at 801 points in [-4, 4]; judged where
  // the two forms differ most (Note [Judging the GELU form], gelu_form.h).
  const int64_t n = 801;
  std::vector<float> xs(size_t(n) * 8, 0.f);
  for (int64_t i = 0; i < n; ++i) xs[size_t(i) * 8] = float(-4.0 + 8.0 * double(i) / double(n - 1));
  std::vector<float> eye(64, 0.f);
  for (int i = 0; i < 8; ++i) eye[size_t(i) * 9] = 1.f;
  const ops::LinearGelu r = ops::linear_gelu(from_vector(xs, {n, 8}).to(kCuda), from_vector(eye, {8, 8}).to(kCuda),
                                             zeros({8}, TensorOptions().device(kCuda)));
  const std::vector<double> got = test::values(r.out.to(Device::cpu()));
  std::vector<double> x, y;
  double err_tanh = 0, err_erf = 0;
  for (int64_t i = 0; i < n; ++i) {
    x.push_back(xs[size_t(i) * 8]);
    y.push_back(got[size_t(i) * 8]);
    err_tanh += std::fabs(y.back() - test::gelu_tanh_form(x.back()));
    err_erf += std::fabs(y.back() - test::gelu_erf_form(x.back()));
  }
  const test::GeluFormVotes votes = test::gelu_form_votes(x, y);
  INFO("mean |epilogue - gelu_tanh| ", err_tanh / n, ", mean |epilogue - gelu_erf| ", err_erf / n,
       "; in 2.2 < |x| < 3.2, closer to tanh at ", votes.tanh, " points, to erf at ", votes.erf);
  CHECK(votes.tanh_form());
}

TEST_CASE("GPT on CUDA: the fused MLP gives the unfused loss and gradients") {
  test::require_cuda();
  models::GPTConfig c = models::gpt_config("gpt-tiny");
  Generator g(3);
  Tensor idx = randint(0, c.vocab_size, {2, 64}, g).to(kCuda), tgt = randint(0, c.vocab_size, {2, 64}, g).to(kCuda);
  std::vector<double> loss;
  std::vector<std::vector<double>> grads;
  for (bool fused : {false, true}) {
    set_fused_gelu_epilogue(fused);
    models::GPT model(models::GPTOptions(c).seed(1));
    model.to(kCuda);
    Tensor l = model.loss(idx, tgt);
    l.backward();
    loss.push_back(l.item());
    for (const auto& [name, p] : model.named_parameters())
      if (name == "transformer.h.0.mlp.c_fc.weight") grads.push_back(test::values(p.grad().to(Device::cpu())));
  }
  set_fused_gelu_epilogue(false);
  CHECK(loss[1] == doctest::Approx(loss[0]).epsilon(1e-4));
  test::check_close(grads[1], grads[0], 1e-3, 1e-5, "c_fc.weight.grad");
}
