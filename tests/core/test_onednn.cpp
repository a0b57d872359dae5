// The oneDNN paths (core/cpu/onednn) against Kiln's plain CPU kernels in the same binary: conv2d
// forward, backward-input and backward-weight on odd shapes (batch 1, non-square, stride, padding,
// dilation, groups, depthwise, 1x1, strides that drop trailing rows, bias, bf16) and f32 GEMM on
// transposed, sliced and batched operands. Skipped (exit 77) in a build without oneDNN.
#include "test_util.h"

#include <kiln/core/cpu/onednn/switch.h>

using namespace kiln;
using ops::Conv2dOptions;

namespace {

void require_onednn() {
  if (!cpu::onednn_built()) {
    std::printf("SKIPPED: built without oneDNN (KILN_ONEDNN=OFF or libdnnl-dev missing)\n");
    std::exit(77);
  }
}

struct ConvCase {
  Shape x, w;
  Conv2dOptions opt;
  bool bias;
};

// The three conv results on both paths; checks that oneDNN really ran all three.
std::vector<std::vector<double>> conv_results(const ConvCase& c, DType dt, bool onednn) {
  cpu::OnednnGuard guard(onednn);
  cpu::CpuWinogradGuard direct(false);  // Kiln's Winograd (on by default with the avx2 set) goes first
  Tensor x = test::random(c.x, dt, 11), w = test::random(c.w, dt, 12);
  Tensor b = c.bias ? test::random({c.w[0]}, dt, 13) : Tensor();
  const int64_t before = cpu::onednn_calls();
  Tensor y = ops::conv2d(x, w, b, c.opt);
  Tensor gy = test::random(y.shape(), dt, 14);
  std::vector<std::vector<double>> out = {test::values(y),
                                          test::values(ops::conv2d_backward_input(gy, w, x.shape(), c.opt)),
                                          test::values(ops::conv2d_backward_weight(gy, x, w.shape(), c.opt))};
  if (onednn)
    CHECK_MESSAGE(cpu::onednn_calls() - before >= 3, "oneDNN did not run for x ", c.x, " w ", c.w);
  else
    CHECK(cpu::onednn_calls() == before);
  return out;
}

}  // namespace

TEST_CASE("oneDNN convolutions match the plain kernels on odd shapes") {
  require_onednn();
  const ConvCase cases[] = {
      {{1, 3, 7, 11}, {5, 3, 3, 2}, Conv2dOptions().stride({2, 1}).padding({1, 0}), false},  // batch 1, non-square
      {{2, 4, 9, 8}, {6, 2, 3, 3}, Conv2dOptions().stride(2).padding(1).dilation(2).groups(2), true},
      {{3, 6, 10, 7}, {6, 1, 3, 3}, Conv2dOptions().padding(1).groups(6), false},  // depthwise
      {{2, 3, 9, 9}, {4, 3, 2, 2}, Conv2dOptions().stride(3), false},  // the stride drops the last row and column
      {{1, 8, 5, 6}, {16, 8, 1, 1}, Conv2dOptions(), true},             // 1x1
      {{2, 8, 6, 5}, {4, 8, 1, 1}, Conv2dOptions().stride(2), false},   // strided 1x1
      {{4, 16, 8, 8}, {32, 16, 3, 3}, Conv2dOptions().padding(1), false},  // the CIFAR CNN's layer shape
      {{2, 5, 12, 9}, {7, 5, 5, 3}, Conv2dOptions().padding({2, 3}).dilation({1, 2}), true},
      // Wide 3x3 layers: Winograd (Note [oneDNN Winograd] in core/cpu/onednn/conv.cpp).
      {{2, 64, 8, 8}, {64, 64, 3, 3}, Conv2dOptions().padding(1), false},
      {{1, 64, 5, 7}, {80, 64, 3, 3}, Conv2dOptions().padding(1), true},
  };
  for (const ConvCase& c : cases)
    for (DType dt : {DType::f32, DType::bf16}) {
      const auto plain = conv_results(c, dt, false), fast = conv_results(c, dt, true);
      const char* names[] = {"forward", "backward input", "backward weight"};
      // Both paths compute in f32; they sum in different orders (a 16-bit result may round to
      // the neighbouring value). Winograd's transforms add error in proportion to the layer's
      // magnitude (sums of 576 terms up to 4 here), not to each output.
      const bool winograd = c.x[1] >= 64;
      const double rtol = dt == DType::f32 ? 2e-5 : 1e-2;
      const double atol = dt == DType::f32 ? (winograd ? 1e-3 : 1e-4) : (winograd ? 2e-1 : 5e-2);
      for (int k = 0; k < 3; ++k)
        test::check_close(fast[k], plain[k], rtol, atol,
                          detail::str_cat(names[k], " ", dt, " x ", c.x, " w ", c.w));
    }
}

TEST_CASE("oneDNN f32 GEMM matches Eigen on transposed, sliced, batched and biased operands") {
  require_onednn();
  auto both = [](const std::function<Tensor()>& fn) {
    std::vector<double> r[2];
    for (int on = 0; on < 2; ++on) {
      cpu::OnednnGuard guard(on == 1);
      const int64_t before = cpu::onednn_calls();
      r[on] = test::values(fn());
      // KILN_ONEDNN_SGEMM=0 in the environment keeps f32 GEMMs on Eigen even when oneDNN is on.
      CHECK((cpu::onednn_calls() > before) == (on == 1 && cpu::onednn_sgemm_enabled()));
    }
    return std::make_pair(r[1], r[0]);
  };
  Tensor a = test::random({67, 130}, DType::f32, 1), b = test::random({130, 45}, DType::f32, 2);
  Tensor big_a = test::random({300, 257}, DType::f32, 3), big_b = test::random({257, 310}, DType::f32, 4);
  Tensor bias = test::random({45}, DType::f32, 5);
  Tensor batch_a = test::random({5, 17, 33}, DType::f32, 6), batch_b = test::random({33, 9}, DType::f32, 7);
  const std::pair<const char*, std::function<Tensor()>> cases[] = {
      {"plain", [&] { return ops::matmul(a, b); }},
      {"a transposed", [&] { return ops::matmul(a.transpose(0, 1).contiguous().transpose(0, 1), b); }},
      {"b transposed", [&] { return ops::matmul(a, b.transpose(0, 1).contiguous().transpose(0, 1)); }},
      {"sliced rows with a step", [&] { return ops::matmul(big_a.slice(0, 1, 300, 2), big_b); }},
      {"sliced columns", [&] { return ops::matmul(big_a, big_b.slice(1, 3, 290)); }},
      {"big", [&] { return ops::matmul(big_a, big_b); }},
      {"linear with bias", [&] { return ops::linear(a, b.transpose(0, 1), bias); }},
      {"batched, broadcast b", [&] { return ops::matmul(batch_a, batch_b); }},
      {"batch transposed", [&] { return ops::matmul(batch_a.transpose(1, 2).contiguous().transpose(1, 2), batch_b); }},
  };
  for (const auto& [what, fn] : cases) {
    auto [fast, plain] = both(fn);
    test::check_close(fast, plain, 1e-5, 1e-4, what);
  }
}

TEST_CASE("f64 stays on the plain kernels") {
  require_onednn();
  cpu::OnednnGuard guard(true);
  const int64_t before = cpu::onednn_calls();
  Tensor x = test::random({2, 3, 6, 6}, DType::f64), w = test::random({4, 3, 3, 3}, DType::f64);
  ops::conv2d(x, w);
  ops::matmul(test::random({40, 50}, DType::f64), test::random({50, 60}, DType::f64));
  CHECK(cpu::onednn_calls() == before);
}
