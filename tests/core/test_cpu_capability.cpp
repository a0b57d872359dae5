// The CPU capabilities (core/cpu_capability.h): detection, the switch and its errors, and every
// kernel set of this build computing what the baseline set computes. Sets differ only in how the
// compiler vectorizes and contracts a*b+c into one FMA (one rounding instead of two), so they agree
// to a few ulps; conversions (bf16/f16 casts), selections, comparisons and integer sums are exact.
#include "test_util.h"

#include <kiln/core/cpu/onednn/switch.h>
#include <kiln/core/cpu_capability.h>

#include <fstream>
#include <functional>
#include <string>

using namespace kiln;
using cpu::Capability;

namespace {

// Runs f under each capability this CPU supports; restores the one in use.
std::vector<std::pair<Capability, Tensor>> under_each(const std::function<Tensor()>& f) {
  const Capability before = cpu::capability();
  std::vector<std::pair<Capability, Tensor>> out;
  for (Capability c : cpu::built_capabilities()) {
    if (!cpu::cpu_supports(c)) continue;
    cpu::set_capability(c);
    out.emplace_back(c, f().to(DType::f64));
  }
  cpu::set_capability(before);
  return out;
}

// Every capability's result within rtol (relative to the largest magnitude, as a*b+c may cancel)
// of the first (the baseline); exact when rtol is 0.
void agree(const std::string& what, const std::function<Tensor()>& f, double rtol) {
  auto results = under_each(f);
  REQUIRE(!results.empty());
  const std::vector<double> base = test::values(results.front().second);
  double scale = 0;
  for (double v : base) scale = std::max(scale, std::fabs(v));
  for (size_t k = 1; k < results.size(); ++k) {
    CAPTURE(what);
    CAPTURE(cpu::capability_name(results[k].first));
    test::check_close(results[k].second, base, rtol, rtol * scale, what);
  }
}

}  // namespace

TEST_CASE("capability names parse both ways, and a bad name is a ValueError naming the variable") {
  for (Capability c : {Capability::kDefault, Capability::kAvx2, Capability::kAvx512, Capability::kNative})
    CHECK(cpu::parse_capability(cpu::capability_name(c)) == c);
  try {
    cpu::parse_capability("avx1024");
    FAIL("no error");
  } catch (const ValueError& e) {
    CHECK(std::string(e.what()).find("KILN_CPU_CAPABILITY=avx1024") != std::string::npos);
  }
}

TEST_CASE("the capability in use is built, supported here, and the best one unless forced") {
  const auto built = cpu::built_capabilities();
  REQUIRE(!built.empty());
  CHECK(cpu::cpu_supports(built.front()));  // the lowest set runs everywhere
  const Capability c = cpu::capability();
  CHECK(cpu::cpu_supports(c));
  CHECK(std::find(built.begin(), built.end(), c) != built.end());
  const char* forced = std::getenv("KILN_CPU_CAPABILITY");
  if (forced == nullptr || *forced == '\0')
    CHECK(c == cpu::best_capability());
  else
    CHECK(std::string(cpu::capability_name(c)) == forced);
  CHECK(cpu::capability_summary().find(cpu::capability_name(c)) != std::string::npos);
  // Under qemu-user with an older CPU model (core_cpu_capability_on_*): the set that CPU must get.
  if (const char* expect = std::getenv("KILN_TEST_EXPECT_BEST"))
    CHECK(std::string(cpu::capability_name(cpu::best_capability())) == expect);
  CHECK(!cpu::cpu_model().empty());
}

TEST_CASE("cpuid agrees with the kernel's view of the CPU (/proc/cpuinfo flags)") {
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) {
      flags = line + " ";
      break;
    }
  if (flags.empty()) return;  // not Linux on x86: nothing to compare with
  auto has = [&](const char* f) { return flags.find(std::string(" ") + f + " ") != std::string::npos; };
  const bool avx2 = has("avx2") && has("fma") && has("bmi2");
  const bool avx512 = avx2 && has("avx512f") && has("avx512bw") && has("avx512dq") && has("avx512vl") && has("avx512cd");
  CHECK(cpu::cpu_supports(Capability::kAvx2) == avx2);
  CHECK(cpu::cpu_supports(Capability::kAvx512) == avx512);
}

TEST_CASE("forcing a capability that is not built or not supported is a ValueError, not a SIGILL") {
  for (Capability c : {Capability::kDefault, Capability::kAvx2, Capability::kAvx512, Capability::kNative}) {
    const auto built = cpu::built_capabilities();
    const bool usable = std::find(built.begin(), built.end(), c) != built.end() && cpu::cpu_supports(c);
    CAPTURE(cpu::capability_name(c));
    if (usable) {
      const Capability before = cpu::capability();
      cpu::set_capability(c);
      CHECK(cpu::capability() == c);
      cpu::set_capability(before);
    } else {
      CHECK_THROWS_AS(cpu::set_capability(c), ValueError);
    }
  }
}

TEST_CASE("every kernel set computes what the baseline computes") {
  const Tensor x = test::random({7, 131}, DType::f32, 11, -4.0, 4.0);
  const Tensor y = test::random({7, 131}, DType::f32, 12, 0.5, 3.0);
  const Tensor xb = x.to(DType::bf16), xh = x.to(DType::f16);
  const Tensor xd = x.to(DType::f64);
  const std::vector<std::pair<const char*, Tensor (*)(const Tensor&)>> unary = {
      {"exp", ops::exp}, {"tanh", ops::tanh}, {"sigmoid", ops::sigmoid}, {"gelu_tanh", ops::gelu_tanh},
      {"gelu_erf", ops::gelu_erf}, {"log", ops::log}, {"rsqrt", ops::rsqrt}};
  for (const auto& [name, fn] : unary) {
    const bool positive = std::string(name) == "log" || std::string(name) == "rsqrt";
    const Tensor in = positive ? y : x;
    agree(std::string("f32 ") + name, [&] { return fn(in); }, 4e-7);
    agree(std::string("bf16 ") + name, [&] { return fn(in.to(DType::bf16)); }, 8e-3);
  }
  agree("casts f32 -> bf16 -> f16 -> f64", [&] { return x.to(DType::bf16).to(DType::f16).to(DType::f64); }, 0);
  agree("cast f64 -> f32", [&] { return ops::mul(xd, 1.0 / 3.0).to(DType::f32); }, 0);
  agree("add", [&] { return ops::add(x, y); }, 0);
  agree("mul bf16", [&] { return ops::mul(xb, y.to(DType::bf16)); }, 0);
  agree("div f16", [&] { return ops::div(xh, y.to(DType::f16)); }, 0);
  agree("where", [&] { return ops::where(ops::gt(x, 0.0), x, y); }, 0);
  agree("gelu backward", [&] { return ops::gelu_tanh_backward(y, x); }, 1e-6);
  agree("sum rows f32", [&] { return ops::sum(x, {1}); }, 1e-6);
  agree("sum cols bf16", [&] { return ops::sum(xb, {0}); }, 8e-3);
  agree("var", [&] { return ops::var(x, {1}); }, 1e-6);
  agree("amax", [&] { return ops::amax(x, {1}); }, 0);
  agree("argmax", [&] { return ops::argmax(x, 1).to(DType::f64); }, 0);
  agree("softmax", [&] { return ops::softmax(x, 1); }, 1e-6);
  agree("log_softmax bf16", [&] { return ops::log_softmax(xb, 1); }, 8e-3);
  agree("layer_norm", [&] { return ops::layer_norm(x, {131}, y.select(0, 0), y.select(0, 1), 1e-5).out; }, 1e-5);
  agree("matmul f32", [&] { return ops::matmul(x, y.transpose(0, 1)); }, 1e-5);
  agree("matmul f64", [&] { return ops::matmul(xd, y.to(DType::f64).transpose(0, 1)); }, 1e-13);
  agree("matmul bf16", [&] { return ops::matmul(xb, y.to(DType::bf16).transpose(0, 1)); }, 8e-3);
  const Tensor targets = ops::argmax(y, 1);
  agree("cross_entropy", [&] { return ops::cross_entropy_forward(x, targets).loss; }, 1e-6);
  const Tensor img = test::random({2, 3, 9, 9}, DType::f32, 13), w = test::random({4, 3, 3, 3}, DType::f32, 14);
  agree("conv2d", [&] { return ops::conv2d(img, w); }, 1e-5);
  {
    cpu::CpuWinogradGuard winograd(true);  // Kiln's Winograd transforms of each set (Note [CPU Winograd])
    const Tensor wide = test::random({2, 64, 6, 6}, DType::f32, 15), ww = test::random({64, 64, 3, 3}, DType::f32, 16);
    agree("conv2d winograd", [&] { return ops::conv2d(wide, ww, Tensor(), ops::Conv2dOptions().padding(1)); }, 1e-5);
  }
  agree("max_pool2d", [&] { return ops::max_pool2d(img, {2, 2}).out; }, 0);
}

TEST_CASE("AdamW's CPU kernel gives the same parameters under every kernel set") {
  agree("adamw", [] {
    Tensor p = test::random({1000}, DType::f32, 21).requires_grad_();
    optim::AdamW opt({p}, optim::AdamWOptions(1e-2).weight_decay(0.1));
    for (int s = 0; s < 3; ++s) {
      opt.zero_grad();
      Tensor g = test::random({1000}, DType::f32, 22 + s);
      sum(mul(p, g)).backward();
      opt.step();
    }
    return p.detach();
  }, 1e-6);
}
