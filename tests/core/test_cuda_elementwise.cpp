// Every elementwise op on CUDA against the CPU path: each dtype the CPU front dispatches, odd and
// large sizes, broadcasting, transposed and misaligned (offset) views, in-place ops through views
// with poisoned surroundings, NaN propagation, promotion, CPU scalars, loops past 2^31 elements
// and past 8 dims. Skipped (exit 77) without a usable device.
#include "test_util.h"

#include <cmath>
#include <functional>
#include <string>

using namespace kiln;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

const DType kFloat[] = {DType::f32, DType::f64, DType::bf16, DType::f16};
const DType kNumeric[] = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32, DType::u8};
const DType kAll[] = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32, DType::u8, DType::b8};

// Odd sizes (not multiples of the block or the vector width), one element, many blocks.
const Shape kUnaryShapes[] = {{1}, {7}, {1023}, {(1 << 20) + 3}, {37, 29}, {2, 3, 5, 7}};

std::string name(const std::string& what, DType dt) { return what + " " + dtype_name(dt); }

// A copy of a CPU tensor on the device that starts one element into its buffer: contiguous,
// but its data pointer is not aligned for the vector path.
Tensor to_cuda_offset(const Tensor& cpu) {
  Tensor buffer = empty({cpu.numel() + 1}, cpu.dtype(), Device::cuda());
  Tensor v = buffer.slice(0, 1, cpu.numel() + 1).view(cpu.shape());
  v.copy_(cpu);
  return v;
}

enum class Layout { contiguous, strided, offset };
const Layout kLayouts[] = {Layout::contiguous, Layout::strided, Layout::offset};
const char* layout_name(Layout l) {
  return l == Layout::contiguous ? "contiguous" : l == Layout::strided ? "strided" : "offset";
}
Tensor to_cuda(const Tensor& cpu, Layout l) {
  if (l == Layout::offset) return to_cuda_offset(cpu);
  return test::to_cuda(cpu, l == Layout::strided);
}

// fn on the CPU inputs vs fn on device copies in every layout; tolerance from the result dtype.
void check_op(const std::string& what, const Fn& fn, const std::vector<Tensor>& cpu, double atol = -1) {
  Tensor expected = fn(cpu);
  const double rtol = test::cuda_rtol(expected.dtype());
  for (Layout l : kLayouts) {
    std::vector<Tensor> dev;
    for (const Tensor& t : cpu) dev.push_back(to_cuda(t, l));
    test::check_cuda_matches(fn(dev), expected, rtol, atol < 0 ? rtol : atol, what + " " + layout_name(l));
  }
}

// Random values for `dt` in [lo, hi) (u8 clamps lo at 0: negative -> u8 is undefined).
Tensor input(const Shape& shape, DType dt, uint64_t seed, double lo, double hi) {
  if (dt == DType::u8) lo = std::max(lo, 0.0);
  return test::random(shape, dt, seed, lo, hi);
}

// Small integers stored in `dt`, so comparisons meet ties.
Tensor small_ints(const Shape& shape, DType dt, uint64_t seed) {
  Tensor i = test::random(shape, DType::i32, seed, dt == DType::u8 ? 0 : -3, 4);
  return dt == DType::b8 ? ops::gt(i, 0.0) : i.to(dt);
}

}  // namespace

TEST_CASE("unary ops match the CPU in every dtype, size and layout") {
  test::require_cuda();
  struct Case { const char* name; Tensor (*op)(const Tensor&); bool numeric; double lo, hi; };
  const Case cases[] = {
      {"neg", ops::neg, true, -50, 50},       {"abs", ops::abs, true, -50, 50},
      {"relu", ops::relu, true, -50, 50},     {"square", ops::square, true, -50, 50},
      {"exp", ops::exp, false, -10, 10},      {"log", ops::log, false, 0.01, 20},
      {"sqrt", ops::sqrt, false, 0, 20},      {"rsqrt", ops::rsqrt, false, 0.01, 20},
      {"tanh", ops::tanh, false, -6, 6},      {"sigmoid", ops::sigmoid, false, -12, 12},
      {"gelu_tanh", ops::gelu_tanh, false, -8, 8}, {"gelu_erf", ops::gelu_erf, false, -8, 8},
  };
  uint64_t seed = 100;
  for (const Case& c : cases) {
    for (DType dt : kNumeric) {
      if (!c.numeric && !is_floating(dt)) continue;
      for (const Shape& shape : kUnaryShapes) {
        Tensor x = input(shape, dt, ++seed, c.lo, c.hi);
        check_op(name(c.name, dt), [&](const auto& v) { return c.op(v[0]); }, {x});
      }
    }
  }
  // Integer inputs of the float functions compute in f32.
  for (DType dt : {DType::i32, DType::u8, DType::i64}) {
    Tensor x = input({1023}, dt, ++seed, 1, 30);
    check_op(name("sqrt of int", dt), [](const auto& v) { return ops::sqrt(v[0]); }, {x});
    check_op(name("exp of int", dt), [](const auto& v) { return ops::exp(v[0]); }, {x});
  }
}

TEST_CASE("binary ops match the CPU with broadcasting in every numeric dtype") {
  test::require_cuda();
  const std::pair<Shape, Shape> shapes[] = {
      {{1}, {1}}, {{7}, {7}}, {{1023}, {1023}}, {{(1 << 20) + 3}, {(1 << 20) + 3}}, {{3, 1, 5}, {4, 5}},
      {{37, 29}, {29}}, {{37, 1}, {1, 29}}, {{7}, {}}, {{}, {5, 3}}, {{2, 3, 4, 5}, {3, 1, 5}},
  };
  struct Case { const char* name; Tensor (*op)(const Tensor&, const Tensor&); };
  const Case cases[] = {{"add", ops::add},         {"sub", ops::sub},         {"mul", ops::mul},
                        {"div", ops::div},         {"maximum", ops::maximum}, {"minimum", ops::minimum}};
  uint64_t seed = 1000;
  for (DType dt : kNumeric) {
    for (const auto& [sa, sb] : shapes) {
      Tensor a = input(sa, dt, ++seed, -20, 20);
      Tensor b = input(sb, dt, ++seed, 1, 9);  // nonzero: integer div promotes, but keep it finite
      for (const Case& c : cases)
        check_op(name(c.name, dt), [&](const auto& v) { return c.op(v[0], v[1]); }, {a, b});
      // pow: a positive base, small exponents (integer results stay in range).
      Tensor base = input(sa, dt, ++seed, is_floating(dt) ? 0.5 : 0, 4);
      Tensor expo = input(sb, dt, ++seed, is_floating(dt) ? -2 : 0, 4);
      check_op(name("pow", dt), [](const auto& v) { return ops::pow(v[0], v[1]); }, {base, expo});
    }
  }
}

TEST_CASE("tensor-scalar ops match the CPU, scalars rounded to the tensor's dtype") {
  test::require_cuda();
  uint64_t seed = 2000;
  for (DType dt : kNumeric) {
    for (const Shape& shape : {Shape{1}, Shape{1023}, Shape{(1 << 20) + 3}, Shape{37, 29}}) {
      Tensor x = input(shape, dt, ++seed, -20, 20);
      Tensor pos = input(shape, dt, ++seed, 1, 4);
      for (double s : {3.0, 0.1, -2.5}) {  // 0.1: not exact in any float type; 2.5 makes ints f32
        if (x.numel() > 100000 && s != 0.1) continue;  // the big size once: it is slow to check
        const std::string at = " s=" + std::to_string(s);
        check_op(name("add" + at, dt), [s](const auto& v) { return ops::add(v[0], s); }, {x});
        check_op(name("sub" + at, dt), [s](const auto& v) { return ops::sub(v[0], s); }, {x});
        check_op(name("rsub" + at, dt), [s](const auto& v) { return ops::rsub(v[0], s); }, {x});
        check_op(name("mul" + at, dt), [s](const auto& v) { return ops::mul(v[0], s); }, {x});
        check_op(name("div" + at, dt), [s](const auto& v) { return ops::div(v[0], s); }, {x});
        check_op(name("maximum" + at, dt), [s](const auto& v) { return ops::maximum(v[0], s); }, {x});
        check_op(name("minimum" + at, dt), [s](const auto& v) { return ops::minimum(v[0], s); }, {x});
      }
      for (double e : {0.5, 2.0, 3.0}) {
        check_op(name("pow e=" + std::to_string(e), dt), [e](const auto& v) { return ops::pow(v[0], e); }, {pos});
      }
    }
  }
}

TEST_CASE("comparisons match the CPU, ties included, tensor and scalar forms") {
  test::require_cuda();
  struct Case { const char* name; Tensor (*tt)(const Tensor&, const Tensor&); Tensor (*ts)(const Tensor&, double); };
  const Case cases[] = {{"eq", ops::eq, ops::eq}, {"ne", ops::ne, ops::ne}, {"lt", ops::lt, ops::lt},
                        {"le", ops::le, ops::le}, {"gt", ops::gt, ops::gt}, {"ge", ops::ge, ops::ge}};
  uint64_t seed = 3000;
  for (DType dt : kNumeric) {
    for (const auto& [sa, sb] : {std::pair<Shape, Shape>{{1023}, {1023}}, {{3, 1, 5}, {4, 5}},
                                 {{(1 << 20) + 3}, {(1 << 20) + 3}}, {{37, 29}, {37, 1}}}) {
      Tensor a = small_ints(sa, dt, ++seed), b = small_ints(sb, dt, ++seed);
      for (const Case& c : cases) {
        check_op(name(c.name, dt), [&](const auto& v) { return c.tt(v[0], v[1]); }, {a, b});
        if (a.numel() > 100000) continue;  // the big size for the tensor form only: it is slow to check
        for (double s : {1.0, 0.5})
          check_op(name(std::string(c.name) + " scalar", dt), [&](const auto& v) { return c.ts(v[0], s); }, {a});
      }
    }
  }
}

TEST_CASE("NaN propagates through maximum, minimum and relu as on the CPU") {
  test::require_cuda();
  for (DType dt : kFloat) {
    Tensor a = input({1023}, dt, 4000, -3, 3), b = input({1023}, dt, 4001, -3, 3);
    // NaN in a at every 3rd element, in b at every 5th (both at every 15th).
    Tensor idx = arange(1023);
    a = ops::where(ops::eq(ops::sub(idx, ops::mul(ops::div(idx, 3.0).to(DType::i64), 3.0)), 0.0),
                   full({}, NAN, dt), a);
    b = ops::where(ops::eq(ops::sub(idx, ops::mul(ops::div(idx, 5.0).to(DType::i64), 5.0)), 0.0),
                   full({}, NAN, dt), b);
    REQUIRE(std::isnan(test::values(a)[0]));
    check_op(name("maximum nan", dt), [](const auto& v) { return ops::maximum(v[0], v[1]); }, {a, b});
    check_op(name("minimum nan", dt), [](const auto& v) { return ops::minimum(v[1], v[0]); }, {a, b});
    check_op(name("maximum scalar nan", dt), [](const auto& v) { return ops::maximum(v[0], 0.0); }, {a});
    check_op(name("minimum scalar nan", dt), [](const auto& v) { return ops::minimum(v[0], NAN); }, {b});
    check_op(name("relu nan", dt), [](const auto& v) { return ops::relu(v[0]); }, {a});
    auto mx = test::values(ops::maximum(test::to_cuda(a), test::to_cuda(b)));
    CHECK(std::isnan(mx[0]));
    CHECK(std::isnan(mx[5]));
    CHECK(std::isnan(mx[3]));
  }
}

TEST_CASE("mixed dtypes promote as on the CPU") {
  test::require_cuda();
  const std::pair<DType, DType> pairs[] = {{DType::i32, DType::f32}, {DType::bf16, DType::f16},
                                           {DType::u8, DType::i64},  {DType::bf16, DType::f32},
                                           {DType::i64, DType::bf16}, {DType::f16, DType::f64},
                                           {DType::u8, DType::i32}};
  uint64_t seed = 5000;
  for (const auto& [da, db] : pairs) {
    Tensor a = input({3, 1, 5}, da, ++seed, 0, 9), b = input({4, 5}, db, ++seed, 1, 9);
    const std::string what = std::string(dtype_name(da)) + "+" + dtype_name(db);
    check_op("add " + what, [](const auto& v) { return ops::add(v[0], v[1]); }, {a, b});
    check_op("mul " + what, [](const auto& v) { return ops::mul(v[1], v[0]); }, {a, b});
    check_op("div " + what, [](const auto& v) { return ops::div(v[0], v[1]); }, {a, b});
    check_op("lt " + what, [](const auto& v) { return ops::lt(v[0], v[1]); }, {a, b});
    check_op("maximum " + what, [](const auto& v) { return ops::maximum(v[0], v[1]); }, {a, b});
  }
}

TEST_CASE("where and masked_fill match the CPU in every dtype") {
  test::require_cuda();
  uint64_t seed = 6000;
  for (DType dt : kAll) {
    Tensor cond = ops::gt(test::random({3, 1, 5}, DType::f32, ++seed), 0.0);
    Tensor a = small_ints({4, 5}, dt, ++seed), b = small_ints({3, 4, 1}, dt, ++seed);
    check_op(name("where", dt), [](const auto& v) { return ops::where(v[0], v[1], v[2]); }, {cond, a, b});
    Tensor big_cond = ops::gt(test::random({(1 << 20) + 3}, DType::f32, ++seed), 0.0);
    Tensor big_a = small_ints({(1 << 20) + 3}, dt, ++seed), big_b = small_ints({(1 << 20) + 3}, dt, ++seed);
    check_op(name("where big", dt), [](const auto& v) { return ops::where(v[0], v[1], v[2]); },
             {big_cond, big_a, big_b});

    Tensor x = small_ints({3, 4, 5}, dt, ++seed);
    Tensor mask = ops::gt(test::random({4, 1}, DType::f32, ++seed), 0.0);
    for (double value : {7.0, 2.5}) {
      check_op(name("masked_fill", dt), [value](const auto& v) { return ops::masked_fill(v[0], v[1], value); },
               {x, mask});
    }
    Tensor full_mask = ops::gt(test::random({3, 4, 5}, DType::f32, ++seed), 0.0);
    check_op(name("masked_fill full mask", dt), [](const auto& v) { return ops::masked_fill(v[0], v[1], 1.0); },
             {x, full_mask});
  }
  // Promotion in where: i32 and f32 branches give f32.
  Tensor cond = ops::gt(test::random({5}, DType::f32, ++seed), 0.0);
  check_op("where i32/f32", [](const auto& v) { return ops::where(v[0], v[1], v[2]); },
           {cond, small_ints({5}, DType::i32, ++seed), test::random({5}, DType::f32, ++seed)});
}

namespace {

// Runs `op` in place on a view of a poisoned base tensor, on the CPU and on CUDA, and compares the
// whole bases: the view's elements must match, the rest must keep the poison.
void check_inplace(const std::string& what, DType dt, const std::function<void(Tensor&, const Tensor&)>& op,
                   const Tensor& b_cpu, uint64_t seed) {
  const Shape base_shape{9, 12};
  const double poison = is_floating(dt) ? std::nan("") : 90.0;
  Tensor values = input({6, 5}, dt, seed, -20, 20);
  auto view_of = [](const Tensor& base) { return base.slice(0, 1, 7).slice(1, 2, 12, 2); };  // (6, 5), strided
  Tensor base_cpu = full(base_shape, poison, dt);
  Tensor view_cpu = view_of(base_cpu);
  view_cpu.copy_(values);
  op(view_cpu, b_cpu);

  Tensor base_gpu = test::poisoned(base_shape, dt);
  Tensor view_gpu = view_of(base_gpu);
  view_gpu.copy_(values);
  op(view_gpu, b_cpu.dim() == 0 ? b_cpu : test::to_cuda(b_cpu, true));
  test::check_cuda_matches(base_gpu, base_cpu, test::cuda_rtol(dt), -1, what);
}

}  // namespace

TEST_CASE("in-place add_ and mul_ through views leave the rest of the tensor alone") {
  test::require_cuda();
  uint64_t seed = 7000;
  for (DType dt : kNumeric) {
    Tensor row = input({5}, dt, ++seed, 0, 5), same = input({6, 5}, dt, ++seed, 0, 5);
    for (double alpha : {1.0, 0.5, 2.0}) {
      check_inplace(name("add_ row alpha " + std::to_string(alpha), dt),
                    dt, [alpha](Tensor& a, const Tensor& b) { ops::add_(a, b, alpha); }, row, ++seed);
      check_inplace(name("add_ full alpha " + std::to_string(alpha), dt),
                    dt, [alpha](Tensor& a, const Tensor& b) { ops::add_(a, b, alpha); }, same, ++seed);
    }
    check_inplace(name("mul_ row", dt), dt, [](Tensor& a, const Tensor& b) { ops::mul_(a, b); }, row, ++seed);
    for (double s : {3.0, 0.1, dt == DType::u8 ? 2.0 : -1.0}) {  // -1 -> u8 is undefined
      check_inplace(name("mul_ scalar " + std::to_string(s), dt), dt,
                    [s](Tensor& a, const Tensor&) { ops::mul_(a, s); }, row, ++seed);
    }
    // Another dtype converts to the target's; a CPU 0-dim tensor acts as a scalar.
    check_inplace(name("add_ f64 operand", dt), dt, [](Tensor& a, const Tensor& b) { ops::add_(a, b); },
                  input({5}, DType::f64, ++seed, 0, 5), ++seed);
    check_inplace(name("add_ cpu scalar", dt), dt, [](Tensor& a, const Tensor& b) { ops::add_(a, b, 2.0); },
                  full({}, 3.0, dt), ++seed);
  }
  // Large and contiguous: the vector path in place, the tail included.
  for (DType dt : {DType::f32, DType::bf16, DType::u8}) {
    Tensor a = input({(1 << 20) + 3}, dt, ++seed, 0, 50), b = input({(1 << 20) + 3}, dt, ++seed, 0, 50);
    Tensor ga = a.to(Device::cuda()), gb = b.to(Device::cuda());
    ops::add_(a, b);
    ops::add_(ga, gb);
    test::check_cuda_matches(ga, a, test::cuda_rtol(dt), -1, name("add_ large", dt));
    ops::mul_(a, b);
    ops::mul_(ga, gb);
    test::check_cuda_matches(ga, a, test::cuda_rtol(dt), -1, name("mul_ large", dt));
  }
  // An operand that partially overlaps the target is read before it is overwritten.
  Tensor base = test::random({1001}, DType::f32, ++seed);
  Tensor gbase = base.to(Device::cuda());
  Tensor t = base.slice(0, 0, 1000), g = gbase.slice(0, 0, 1000);
  ops::add_(t, base.slice(0, 1, 1001));
  ops::add_(g, gbase.slice(0, 1, 1001));
  test::check_cuda_matches(gbase, base, 1e-6, -1, "add_ overlapping");
  // The operand is the target itself.
  ops::mul_(g, g);
  ops::mul_(t, t);
  test::check_cuda_matches(gbase, base, 1e-6, -1, "mul_ self");
}

TEST_CASE("fused GELU backward matches the CPU, and autograd's gelu gradient on CUDA matches") {
  test::require_cuda();
  uint64_t seed = 8000;
  for (DType dt : kFloat) {
    for (const Shape& shape : {Shape{1}, Shape{1023}, Shape{(1 << 20) + 3}, Shape{37, 29}}) {
      Tensor x = input(shape, dt, ++seed, -8, 8), g = input(shape, dt, ++seed, -2, 2);
      check_op(name("gelu_tanh_backward", dt), [](const auto& v) { return ops::gelu_tanh_backward(v[0], v[1]); },
               {g, x});
      check_op(name("gelu_erf_backward", dt), [](const auto& v) { return ops::gelu_erf_backward(v[0], v[1]); },
               {g, x});
    }
  }
  for (GeluApproximate approx : {GeluApproximate::tanh, GeluApproximate::none}) {
    Tensor x = test::random({33, 65}, DType::f32, ++seed, -5, 5), g = test::random({33, 65}, DType::f32, ++seed);
    Tensor xc = x.clone().requires_grad_(), xg = x.to(Device::cuda()).requires_grad_();
    gelu(xc, approx).backward(g);
    gelu(xg, approx).backward(g.to(Device::cuda()));
    REQUIRE(xg.grad().defined());
    test::check_cuda_matches(xg.grad(), xc.grad(), 1e-5, -1, "autograd gelu grad");
  }
}

TEST_CASE("a 0-dim CPU tensor acts as a scalar next to CUDA tensors; other device mixes fail") {
  test::require_cuda();
  Tensor x = test::random({37, 29}, DType::f32, 9000);
  Tensor gx = test::to_cuda(x, true);
  const Tensor s = full({}, 2.5), z = zeros({}), i = full({}, 3.0, DType::i64);
  auto same = [](const Tensor& gpu, const Tensor& cpu, const char* what) {
    test::check_cuda_matches(gpu, cpu, 1e-6, -1, what);
  };
  same(ops::add(gx, s), ops::add(x, s), "x + s");
  same(ops::sub(s, gx), ops::sub(s, x), "s - x (mirrored to rsub)");
  same(ops::div(s, gx), ops::div(s, x), "s / x (s moved to the device)");
  same(ops::maximum(z, gx), ops::maximum(z, x), "maximum(0, x)");
  same(ops::lt(s, gx), ops::lt(s, x), "s < x (mirrored to gt)");
  same(ops::mul(i, gx), ops::mul(i, x), "i64 scalar * f32");
  Tensor cond = ops::gt(gx, 0.0);
  same(ops::where(cond, gx, z), ops::where(ops::gt(x, 0.0), x, z), "where(c, x, 0)");
  same(ops::where(cond, s, z), ops::where(ops::gt(x, 0.0), s, z), "where(c, s, 0)");
  // Two CPU scalars stay on the CPU.
  CHECK(ops::add(s, z).device().is_cpu());
  // A CPU tensor with dims does not mix with a CUDA one.
  CHECK_ERROR_CONTAINS(ops::add(gx, x), "add", "cuda:0", "cpu");
  CHECK_ERROR_CONTAINS(ops::where(cond, x, gx), "where", "cuda:0", "cpu");
  Tensor t = x.clone();
  CHECK_ERROR_CONTAINS(ops::add_(t, gx), "add_", "cuda:0", "cpu");
  // Unsupported dtypes fail as on the CPU.
  Tensor flags = ops::gt(gx, 0.0);
  CHECK_ERROR_CONTAINS(ops::neg(flags), "neg", "bool");
  CHECK_ERROR_CONTAINS(ops::add(flags, flags), "add", "bool");
}

TEST_CASE("loops with more than 8 unmergeable dims give the CPU's results") {
  // Note [32-bit pieces] in core/cuda/plan/elementwise_offsets.h: 10 dims run as 4 launches of 8.
  test::require_cuda();
  const Shape shape(10, 2);  // 10 dims of 2
  Tensor x = test::random(shape, DType::f32, 9100);
  Shape rev;
  for (int64_t d = 9; d >= 0; --d) rev.push_back(d);
  Tensor xp = x.permute(rev);  // every dim's stride breaks the merge
  Tensor gp = x.to(Device::cuda()).permute(rev);
  test::check_cuda_matches(ops::exp(gp), ops::exp(xp), 1e-5, -1, "exp 10 dims");
  Tensor y = test::random(xp.shape(), DType::f32, 9101);
  test::check_cuda_matches(ops::add(gp, y.to(Device::cuda())), ops::add(xp, y), 1e-6, -1, "add 10 dims");
  // In place through the permuted view (the outer dims are peeled into separate launches).
  Tensor xc = x.clone();
  Tensor gc = x.to(Device::cuda());
  Tensor vc = xc.permute(rev), vg = gc.permute(rev);
  ops::add_(vc, y, 0.5);
  ops::add_(vg, y.to(Device::cuda()), 0.5);
  test::check_cuda_matches(gc, xc, 1e-6, -1, "add_ 10 dims in place");
}

TEST_CASE("loops past 2^31 elements: the vector path and the strided pieces index with int64") {
  test::require_cuda();
  // Contiguous: 2^31 + 33 bytes, vector loads with a tail.
  const int64_t n = (1LL << 31) + 33;
  Tensor ones_u8 = full({n}, 1.0, TensorOptions(DType::u8).device(Device::cuda()));
  Tensor y = ops::add(ones_u8, 2.0);
  for (int64_t start : {int64_t(0), int64_t((1LL << 31) - 20), n - 40}) {
    auto v = test::values(y.slice(0, start, start + 40));
    CHECK(v == std::vector<double>(40, 3.0));
  }
  ones_u8 = Tensor();
  y = Tensor();
  // Strided: (5, 2^29 + 7) = column + row, both broadcast: 2.7e9 elements in pieces of 3 and 2
  // rows, the output's offsets past 2^31.
  const int64_t m = (1LL << 29) + 7;
  std::vector<uint8_t> row_values(m);
  for (int64_t j = 0; j < m; ++j) row_values[j] = static_cast<uint8_t>(j % 250);
  Tensor row = from_vector(row_values, {1, m}).to(Device::cuda());
  row_values = {};
  Tensor col = from_vector(std::vector<uint8_t>{0, 1, 2, 3, 4}, {5, 1}).to(Device::cuda());
  Tensor sum = ops::add(col, row);
  REQUIRE(sum.shape() == Shape{5, m});
  for (int64_t i = 0; i < 5; ++i) {
    for (int64_t start : {int64_t(0), m / 2 + 3, m - 40}) {
      auto v = test::values(sum.select(0, i).slice(0, start, start + 40));
      std::vector<double> expect;
      for (int64_t j = start; j < start + 40; ++j) expect.push_back(double(i + j % 250));
      CHECK_MESSAGE(v == expect, "row ", i, " from ", start);
    }
  }
}
