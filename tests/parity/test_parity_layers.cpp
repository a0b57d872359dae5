// Parity with PyTorch 1.13: every nn layer's forward and backward (float64) with torch's weights
// and inputs (tests/parity/gen_layers.py): outputs, input gradients, parameter gradients and the
// buffers a forward updates (BatchNorm running statistics).
#include "parity_util.h"

#include <kiln/nn/nn.h>

using namespace kiln;

namespace {

struct LayerCase {
  std::function<std::shared_ptr<nn::Module>()> make;
  std::function<Tensor(nn::Module&, const Tensor&)> forward;
};

template <class M, class... Args>
LayerCase layer(Args... args) {
  return {[=] { return std::static_pointer_cast<nn::Module>(std::make_shared<M>(args...)); },
          [](nn::Module& m, const Tensor& x) { return static_cast<M&>(m).forward(x); }};
}

std::map<std::string, LayerCase> layer_cases() {
  std::map<std::string, LayerCase> m;
  m["linear"] = layer<nn::Linear>(nn::LinearOptions(7, 5));
  m["linear_nobias"] = layer<nn::Linear>(nn::LinearOptions(7, 5).bias(false));
  m["embedding"] = layer<nn::Embedding>(nn::EmbeddingOptions(11, 6));
  m["layer_norm"] = layer<nn::LayerNorm>(nn::LayerNormOptions({8}));
  m["gelu"] = layer<nn::GELU>(nn::GELUOptions());
  m["gelu_tanh"] = layer<nn::GELU>(nn::GELUOptions().approximate(GeluApproximate::tanh));
  m["relu"] = layer<nn::ReLU>();
  m["conv2d"] = layer<nn::Conv2d>(nn::Conv2dOptions(3, 4, 3).stride(2).padding(1));
  m["batch_norm2d"] = layer<nn::BatchNorm2d>(nn::BatchNormOptions(4));
  m["batch_norm2d_eval"] = layer<nn::BatchNorm2d>(nn::BatchNormOptions(4));
  m["max_pool2d"] = layer<nn::MaxPool2d>(nn::MaxPool2dOptions(2));
  m["adaptive_avg_pool2d"] = layer<nn::AdaptiveAvgPool2d>(nn::AdaptiveAvgPool2dOptions({2, 3}));
  m["flatten"] = layer<nn::Flatten>();
  m["dropout_eval"] = layer<nn::Dropout>(nn::DropoutOptions(0.5));
  return m;
}

}  // namespace

TEST_CASE("every layer matches PyTorch forward and backward (f64)") {
  SafetensorsFile file = test::load_oracle("parity_layers.safetensors");
  const double tol = 1e-10;
  int compared = 0;
  for (auto& [name, c] : layer_cases()) {
    CAPTURE(name);
    std::string p = name + ".";
    REQUIRE_MESSAGE(file.contains(p + "out"), "case ", name, " is missing from the oracle");
    auto module = c.make();
    module->to(DType::f64);
    module->load_state_dict(test::with_prefix(file, p + "param."), /*strict=*/true);
    module->train(name.find("_eval") == std::string::npos);
    Tensor x = file.at(p + "input");
    bool differentiable = is_floating(x.dtype());
    if (differentiable) x.requires_grad_();
    Tensor y = c.forward(*module, x);
    test::check_rel(y, file.at(p + "out"), tol, name + " out");
    y.backward(file.at(p + "grad_out"));
    if (differentiable) test::check_rel(x.grad(), file.at(p + "grad_input"), tol, name + " grad_input");
    for (auto& [pname, param] : module->named_parameters())
      test::check_rel(param.grad(), file.at(p + "grad." + pname), tol, name + " grad " + pname);
    for (auto& [bname, want] : test::with_prefix(file, p + "buffer_after.")) {
      Tensor got;
      for (auto& [n, b] : module->named_buffers())
        if (n == bname) got = b;
      test::check_rel(got, want, tol, name + " buffer " + bname);
    }
    ++compared;
  }
  MESSAGE("compared ", compared, " layers with torch ", file.metadata["torch"]);
}

TEST_CASE("a wide 3x3 conv2d matches PyTorch in f32") {
  // With oneDNN this layer runs its Winograd kernels (Note [oneDNN Winograd] in
  // core/cpu/onednn/conv.cpp), which round differently from a direct sum; parity_layers_plain runs
  // it on Kiln's im2col kernels. The tolerance is the f32 CNN parity's (test_parity_cnn.cpp).
  SafetensorsFile file = test::load_oracle("parity_layers.safetensors");
  const std::string p = "conv2d_wide.";
  auto conv = std::make_shared<nn::Conv2d>(nn::Conv2dOptions(64, 64, 3).padding(1));
  conv->to(DType::f64);
  conv->load_state_dict(test::with_prefix(file, p + "param."), /*strict=*/true);
  conv->to(DType::f32);
  Tensor x = file.at(p + "input").to(DType::f32);
  x.requires_grad_();
  Tensor y = conv->forward(x);
  const double tol = 1e-4;
  test::check_rel(y, file.at(p + "out"), tol, "conv2d_wide out");
  y.backward(file.at(p + "grad_out").to(DType::f32));
  test::check_rel(x.grad(), file.at(p + "grad_input"), tol, "conv2d_wide grad_input");
  for (auto& [pname, param] : conv->named_parameters())
    test::check_rel(param.grad(), file.at(p + "grad." + pname), tol, "conv2d_wide grad " + pname);
}

TEST_CASE("losses match PyTorch (f64)") {
  SafetensorsFile file = test::load_oracle("parity_layers.safetensors");
  struct LossCase { const char* name; std::function<Tensor(const Tensor&, const Tensor&)> fn; };
  const LossCase cases[] = {
      {"cross_entropy", [](const Tensor& x, const Tensor& t) { return cross_entropy(x, t); }},
      {"cross_entropy_smooth",
       [](const Tensor& x, const Tensor& t) { return cross_entropy(x, t, CrossEntropyOptions().label_smoothing(0.1)); }},
      {"cross_entropy_sum",
       [](const Tensor& x, const Tensor& t) { return cross_entropy(x, t, CrossEntropyOptions().reduction(Reduction::sum)); }},
      {"mse", [](const Tensor& x, const Tensor& t) { return mse_loss(x, t); }},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    std::string p = std::string(c.name) + ".";
    Tensor x = file.at(p + "input").clone();
    x.requires_grad_();
    Tensor loss = c.fn(x, file.at(p + "target"));
    test::check_rel(loss, file.at(p + "out"), 1e-12, p + "out");
    loss.backward();
    test::check_rel(x.grad(), file.at(p + "grad_input"), 1e-12, p + "grad_input");
  }
}
