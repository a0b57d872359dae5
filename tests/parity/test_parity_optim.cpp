// Parity with PyTorch 1.13 on the CPU for optimizer trajectories: gen_optim.py stores initial
// parameters, a gradient sequence and torch's parameters after each of 10 steps of
// SGD(momentum=0.9, nesterov=True, weight_decay=1e-4) and AdamW(lr=1e-3, betas=(0.9, 0.95),
// weight_decay=0.1), in f32 and f64; Kiln replays the same steps and compares after every step.
#include "test_util.h"

#include <filesystem>
#include <functional>
#include <memory>

using namespace kiln;

namespace {

std::string oracle_path() {
  const char* dir = std::getenv("KILN_TEST_DATA");
  return std::string(dir ? dir : ".") + "/parity_optim.safetensors";
}

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

void replay(const SafetensorsFile& file, const std::string& name, DType dt, const MakeOptimizer& make) {
  std::vector<Tensor> params;
  for (int k = 0; file.contains("init." + std::to_string(k)); ++k) params.push_back(file.at("init." + std::to_string(k)).to(dt).clone());
  REQUIRE(params.size() == 3);
  auto opt = make(params);
  // torch's own f32 rounding differs from ours by an ulp here and there (FMA in its vector
  // kernels); relative error 1e-5 in f32, 1e-10 in f64.
  const double rtol = dt == DType::f32 ? 1e-5 : 1e-10, atol = dt == DType::f32 ? 1e-7 : 1e-13;
  int compared = 0;
  for (int s = 0; file.contains(name + "." + dtype_name(dt) + ".step" + std::to_string(s) + ".0"); ++s) {
    for (size_t k = 0; k < params.size(); ++k) {
      const std::string g = "grad." + std::to_string(s) + "." + std::to_string(k);
      params[k].set_grad(file.contains(g) ? file.at(g).to(dt) : Tensor());
    }
    opt->step();
    for (size_t k = 0; k < params.size(); ++k) {
      const std::string key = name + "." + dtype_name(dt) + ".step" + std::to_string(s) + "." + std::to_string(k);
      const Tensor& want = file.at(key);
      REQUIRE(want.dtype() == dt);
      test::check_close(params[k], test::values(want), rtol, atol, key);
      ++compared;
    }
  }
  CHECK_MESSAGE(compared == 30, name, " ", dtype_name(dt), ": compared ", compared, " parameter states, expected 30");
}

}  // namespace

TEST_CASE("SGD and AdamW trajectories match PyTorch") {
  const std::string path = oracle_path();
  if (!std::filesystem::exists(path)) {
    std::printf("SKIPPED: %s is missing (no python3 with torch to generate it)\n", path.c_str());
    std::exit(77);
  }
  SafetensorsFile file = load_safetensors(path);
  CHECK_FALSE(file.contains("grad.3.1"));  // the oracle skips a parameter at one step
  for (DType dt : {DType::f32, DType::f64}) {
    CAPTURE(dt);
    replay(file, "sgd", dt, [](std::vector<Tensor> p) {
      return std::make_unique<optim::SGD>(std::move(p),
                                          optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(1e-4));
    });
    replay(file, "adamw", dt, [](std::vector<Tensor> p) {
      return std::make_unique<optim::AdamW>(std::move(p),
                                            optim::AdamWOptions(1e-3).betas({0.9, 0.95}).weight_decay(0.1));
    });
  }
  MESSAGE("compared with torch ", file.metadata["torch"]);
}
