// Parity with PyTorch 1.13 for models::CifarCnn (tests/parity/gen_cnn.py): with torch's weights
// and batch, the logits, the label-smoothed cross-entropy loss, every parameter gradient and the
// BatchNorm running statistics after the step match, in f64 (rel 1e-9) and f32 (rel 1e-4).
#include "parity_util.h"

#include <kiln/models/cifar_cnn.h>

using namespace kiln;

namespace {

void compare_case(const SafetensorsFile& file, const std::string& name, DType dtype, double tol) {
  CAPTURE(name);
  CAPTURE(dtype);
  const std::string p = name + ".";
  REQUIRE_MESSAGE(file.contains(p + "loss"), "case ", name, " is missing from the oracle");
  auto config = models::CifarCnnConfig().widths({8, 16, 16}).pool(name == "max" ? models::CifarPool::max
                                                                               : models::CifarPool::avg);
  Generator gen(7);  // any weights: load_state_dict replaces them all
  auto model = std::make_shared<models::CifarCnn>(config, gen);
  model->to(DType::f64);  // torch's weights are f64; the f32 case rounds them after loading
  model->load_state_dict(test::with_prefix(file, p + "param."), /*strict=*/true);
  model->to(dtype);
  model->train();

  Tensor x = file.at(p + "input").to(dtype);
  Tensor logits = model->forward(x);
  CHECK(logits.dtype() == dtype);
  test::check_rel(logits, file.at(p + "logits"), tol, p + "logits");
  Tensor loss = cross_entropy(logits, file.at(p + "labels"), CrossEntropyOptions().label_smoothing(0.2));
  test::check_rel(loss, file.at(p + "loss"), tol, p + "loss");
  loss.backward();

  int grads = 0;
  for (auto& [pname, param] : model->named_parameters()) {
    test::check_rel(param.grad(), file.at(p + "grad." + pname), tol, p + "grad." + pname);
    ++grads;
  }
  CHECK(grads == static_cast<int>(test::with_prefix(file, p + "grad.").size()));
  auto buffers = model->named_buffers();
  int compared = 0;
  for (auto& [bname, want] : test::with_prefix(file, p + "buffer_after.")) {
    for (auto& [n, b] : buffers) {
      if (n != bname) continue;
      test::check_rel(b, want, tol, p + "buffer_after." + bname);
      ++compared;
    }
  }
  CHECK(compared == static_cast<int>(buffers.size()));
}

}  // namespace

TEST_CASE("CifarCnn forward and backward match PyTorch (f64)") {
  SafetensorsFile file = test::load_oracle("parity_cnn.safetensors");
  for (const char* name : {"max", "avg"}) compare_case(file, name, DType::f64, 1e-9);
  MESSAGE("torch ", file.metadata["torch"]);
}

TEST_CASE("CifarCnn forward and backward match PyTorch (f32)") {
  SafetensorsFile file = test::load_oracle("parity_cnn.safetensors");
  for (const char* name : {"max", "avg"}) compare_case(file, name, DType::f32, 1e-4);
}
