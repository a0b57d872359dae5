// Tensor handles, views (no copies), contiguous/clone/to, item and printing.
#include "test_util.h"

using namespace kiln;
using kiln::test::at;
using kiln::test::values;

TEST_CASE("a Tensor copy aliases; clone does not") {
  Tensor a = arange(6, DType::f32).view({2, 3});
  Tensor b = a;
  b.fill_(7);
  CHECK(a.to_vector<float>() == std::vector<float>(6, 7.f));
  Tensor c = a.clone();
  c.fill_(1);
  CHECK(a.to_vector<float>()[0] == 7.f);
  CHECK(c.storage() != a.storage());
}

TEST_CASE("views share storage and index correctly") {
  Tensor a = test::random({2, 3, 4}, DType::f64, 3);
  auto ref = [&](int64_t i, int64_t j, int64_t k) { return at(a, {i, j, k}); };

  Tensor t = a.transpose(0, 2);  // (4, 3, 2)
  CHECK(t.shape() == Shape{4, 3, 2});
  CHECK(t.storage() == a.storage());
  CHECK_FALSE(t.is_contiguous());
  CHECK(at(t, {3, 1, 0}) == ref(0, 1, 3));

  Tensor p = a.permute({1, 2, 0});  // (3, 4, 2)
  CHECK(at(p, {2, 3, 1}) == ref(1, 2, 3));

  Tensor s = a.slice(2, 1, 4, 2);  // k in {1, 3}
  CHECK(s.shape() == Shape{2, 3, 2});
  CHECK(at(s, {1, 2, 1}) == ref(1, 2, 3));

  Tensor n = a.narrow(1, 1, 2);
  CHECK(at(n, {0, 1, 2}) == ref(0, 2, 2));

  Tensor sel = a.select(1, -1);
  CHECK(sel.shape() == Shape{2, 4});
  CHECK(at(sel, {1, 0}) == ref(1, 2, 0));

  Tensor u = a.unsqueeze(1);
  CHECK(u.shape() == Shape{2, 1, 3, 4});
  CHECK(u.squeeze(1).shape() == Shape{2, 3, 4});
  CHECK(u.squeeze().shape() == Shape{2, 3, 4});

  Tensor col = a.select(2, 0).unsqueeze(2);  // (2, 3, 1)
  Tensor e = col.expand({2, 3, 5});
  CHECK(e.strides()[2] == 0);
  CHECK(at(e, {1, 2, 4}) == ref(1, 2, 0));

  Tensor v = a.view({6, 4});
  CHECK(v.storage() == a.storage());
  CHECK(at(v, {4, 3}) == ref(1, 1, 3));
  CHECK(a.view({-1}).shape() == Shape{24});
  CHECK(a.flatten(1).shape() == Shape{2, 12});
}

TEST_CASE("view after transpose: allowed where the strides permit, reshape copies otherwise") {
  Tensor a = arange(24, DType::f32).view({2, 3, 4});
  Tensor t = a.transpose(0, 1);  // (3, 2, 4): the last dim stays contiguous
  Tensor v = t.view({3, 2, 2, 2});
  CHECK(v.storage() == a.storage());
  CHECK_ERROR_CONTAINS(t.view({6, 4}), "view", "[3, 2, 4]", "reshape");
  Tensor r = t.reshape({6, 4});
  CHECK(r.storage() != a.storage());
  CHECK(values(r) == values(t.contiguous()));
  CHECK(values(r)[4] == 12.0);  // row 1 of the reshaped copy is a[0][1][*]... t[0][1] = a[1][0]
}

TEST_CASE("a tensor with no elements is contiguous, as in torch (found by fuzz_safetensors)") {
  CHECK(empty({0, 0}).is_contiguous());
  CHECK(zeros({2, 0, 3}).is_contiguous());
  Tensor e = empty({0, 4});
  CHECK(e.contiguous().is_same(e));
  CHECK(empty({3, 4}).t().slice(0, 0, 0).is_contiguous());
}

TEST_CASE("contiguous, to(dtype) and item") {
  Tensor a = test::random({3, 5}, DType::f32, 9);
  Tensor t = a.t();
  Tensor c = t.contiguous();
  CHECK(c.is_contiguous());
  test::for_each_index(t.shape(), [&](const std::vector<int64_t>& i) { CHECK(at(c, i) == at(t, i)); });
  CHECK(a.contiguous().is_same(a));

  Tensor d = t.to(DType::f64);
  CHECK(d.dtype() == DType::f64);
  test::for_each_index(t.shape(), [&](const std::vector<int64_t>& i) { CHECK(at(d, i) == at(t, i)); });

  CHECK(full({}, 2.5).item() == 2.5);
  CHECK_ERROR_CONTAINS(a.item(), "item", "[3, 5]");
}

TEST_CASE("dtype conversions: bf16/f16 round to nearest even, NaN and inf survive") {
  std::vector<float> in = {1.0f, 1.00390625f, 1.01171875f, -0.0f, 65504.f, 65520.f, 1e-8f,
                           std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  Tensor x = from_vector(in, {int64_t(in.size())});
  auto bf = values(x.to(DType::bf16));
  CHECK(bf[0] == 1.0);
  CHECK(bf[1] == 1.0);        // halfway between 1 and 1.0078125: rounds to even (1.0)
  CHECK(bf[2] == 1.015625);   // halfway between 1.0078125 and 1.015625: to even (1.015625)
  CHECK(std::signbit(bf[3]));
  CHECK(std::isinf(bf[7]));
  CHECK(std::isnan(bf[8]));
  auto h = values(x.to(DType::f16));
  CHECK(h[4] == 65504.0);
  CHECK(std::isinf(h[5]));      // 65520 rounds up past the largest half
  CHECK(h[6] == 0.0);           // below half the smallest subnormal (2^-25): rounds to 0
  CHECK(std::isinf(h[7]));
  CHECK(std::isnan(h[8]));
  // Exhaustive: every half value survives f16 -> f32 -> f16.
  std::vector<Half> all(65536);
  for (uint32_t b = 0; b < 65536; ++b) all[b] = Half::from_bits(uint16_t(b));
  Tensor hs = from_vector(all, {65536});
  Tensor back = hs.to(DType::f32).to(DType::f16);
  const Half* p = back.data<Half>();
  int mismatches = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    bool nan = ((b & 0x7C00u) == 0x7C00u) && (b & 0x3FFu);
    if (nan ? ((p[b].bits & 0x7C00u) != 0x7C00u || !(p[b].bits & 0x3FFu)) : p[b].bits != b) ++mismatches;
  }
  CHECK(mismatches == 0);
  // Integers and bool.
  Tensor f = from_vector(std::vector<float>{-2.7f, 0.f, 3.9f}, {3});
  CHECK(values(f.to(DType::i64)) == std::vector<double>{-2, 0, 3});
  CHECK(values(f.to(DType::b8)) == std::vector<double>{1, 0, 1});
  // Floating to u8 goes through int64, as torch converts: -2.7 -> -2 -> 254 (Note [Conversion to u8]).
  CHECK(values(f.to(DType::u8)) == std::vector<double>{254, 0, 3});
  CHECK(values(from_vector(std::vector<double>{-1.5, 255.9, 256.0}, {3}).to(DType::u8)) ==
        std::vector<double>{255, 255, 0});
}

TEST_CASE("factories and reproducible random numbers") {
  CHECK(values(arange(1, 7, 2)) == std::vector<double>{1, 3, 5});
  CHECK(values(full({2}, 3.0, DType::i32)) == std::vector<double>{3, 3});
  Generator g1(42), g2(42);
  Tensor a = randn({1000}, g1), b = randn({1000}, g2);
  CHECK(values(a) == values(b));
  Tensor c = randn({1000}, g1);  // the generator advanced: a different draw
  CHECK(values(a) != values(c));
  // Same numbers for any thread count.
  int saved = num_threads();
  set_num_threads(1);
  Generator g3(7);
  auto one = values(rand({100000}, g3));
  set_num_threads(2);
  Generator g4(7);
  auto two = values(rand({100000}, g4));
  set_num_threads(saved);
  CHECK(one == two);
  // Moments of randn.
  Generator g5(1);
  auto n = values(randn({200000}, g5));
  double mean = 0, var = 0;
  for (double v : n) mean += v;
  mean /= n.size();
  for (double v : n) var += (v - mean) * (v - mean);
  var /= n.size();
  CHECK(std::fabs(mean) < 0.01);
  CHECK(std::fabs(var - 1.0) < 0.02);
  auto u = values(rand({100000}, g5));
  for (double v : u) REQUIRE((v >= 0.0 && v < 1.0));
}

TEST_CASE("printing") {
  Tensor a = arange(6, DType::i64).view({2, 3});
  CHECK(a.str() == "tensor([[0, 1, 2],\n        [3, 4, 5]], shape=[2, 3], dtype=i64)");
  CHECK(full({}, 1.5).str() == "tensor(1.5000, shape=[], dtype=f32)");
}

TEST_CASE("bad views name the values") {
  Tensor a = zeros({2, 3});
  CHECK_ERROR_CONTAINS(a.view({4, 2}), "[4, 2]", "[2, 3]");
  CHECK_ERROR_CONTAINS(a.transpose(0, 2), "dim 2", "2 dims");
  CHECK_ERROR_CONTAINS(a.expand({4, 3}), "expand", "[2, 3]", "[4, 3]");
  CHECK_ERROR_CONTAINS(a.narrow(1, 2, 2), "narrow", "dim 1", "size 3");
  CHECK_ERROR_CONTAINS(a.select(0, 5), "select", "index 5");
  CHECK_ERROR_CONTAINS(a.permute({0, 0}), "permute", "repeats");
  CHECK_ERROR_CONTAINS(a.data<double>(), "data<f64>", "f32");
  CHECK_ERROR_CONTAINS(zeros({2}, Device::cuda()), "CUDA");
}
