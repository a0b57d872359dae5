// conv2d, its three backward kernels, im2col and col2im against plain double loops over test::at,
// for stride / padding / dilation / groups, every floating dtype, strided inputs; adjoint identities
// (<conv(x), g> == <x, conv_backward_input(g)>, same for the weight), thread independence, errors.
#include "test_util.h"

#include <kiln/core/cpu/onednn/switch.h>

using namespace kiln;
using kiln::test::at;
using ops::Conv2dOptions;

namespace {

struct Expected {
  Shape shape;
  std::vector<double> value, scale;  // scale: sum of |terms|, the size of the rounding error
};

struct Dims {
  int64_t n, c, h, w, o, kh, kw, oh, ow, groups, sh, sw, ph, pw, dh, dw;
};

Dims dims(const Shape& x, const Shape& w, const Conv2dOptions& opt) {
  Dims d{x[0], x[1], x[2], x[3], w[0], w[2], w[3], 0, 0, opt.groups_, opt.stride_.h, opt.stride_.w,
         opt.padding_.h, opt.padding_.w, opt.dilation_.h, opt.dilation_.w};
  d.oh = (d.h + 2 * d.ph - d.dh * (d.kh - 1) - 1) / d.sh + 1;
  d.ow = (d.w + 2 * d.pw - d.dw * (d.kw - 1) - 1) / d.sw + 1;
  return d;
}

// Calls fn(n, o, oy, ox, ci, c, i, j, iy, ix) for every in-range term of the convolution sum:
// output (n, o, oy, ox) += x(n, ci, iy, ix) * w(o, c, i, j).
template <class F>
void for_each_term(const Dims& d, F&& fn) {
  const int64_t cg = d.c / d.groups, og = d.o / d.groups;
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t o = 0; o < d.o; ++o)
      for (int64_t oy = 0; oy < d.oh; ++oy)
        for (int64_t ox = 0; ox < d.ow; ++ox)
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t i = 0; i < d.kh; ++i)
              for (int64_t j = 0; j < d.kw; ++j) {
                const int64_t iy = oy * d.sh - d.ph + i * d.dh, ix = ox * d.sw - d.pw + j * d.dw;
                if (iy < 0 || iy >= d.h || ix < 0 || ix >= d.w) continue;
                fn(n, o, oy, ox, (o / og) * cg + c, c, i, j, iy, ix);
              }
}

Expected reference_conv(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& opt) {
  const Dims d = dims(x.shape(), w.shape(), opt);
  Expected e{{d.n, d.o, d.oh, d.ow}, {}, {}};
  e.value.assign(d.n * d.o * d.oh * d.ow, 0.0);
  e.scale = e.value;
  auto flat = [&](int64_t n, int64_t o, int64_t oy, int64_t ox) { return ((n * d.o + o) * d.oh + oy) * d.ow + ox; };
  for_each_term(d, [&](int64_t n, int64_t o, int64_t oy, int64_t ox, int64_t ci, int64_t c, int64_t i, int64_t j,
                       int64_t iy, int64_t ix) {
    const double p = at(x, {n, ci, iy, ix}) * at(w, {o, c, i, j});
    e.value[flat(n, o, oy, ox)] += p;
    e.scale[flat(n, o, oy, ox)] += std::fabs(p);
  });
  if (bias.defined())
    test::for_each_index(e.shape, [&](const std::vector<int64_t>& i) {
      e.value[flat(i[0], i[1], i[2], i[3])] += at(bias, {i[1]});
      e.scale[flat(i[0], i[1], i[2], i[3])] += std::fabs(at(bias, {i[1]}));
    });
  return e;
}

Expected reference_backward_input(const Tensor& gy, const Tensor& w, const Shape& xs, const Conv2dOptions& opt) {
  const Dims d = dims(xs, w.shape(), opt);
  Expected e{xs, std::vector<double>(shape_numel(xs), 0.0), std::vector<double>(shape_numel(xs), 0.0)};
  for_each_term(d, [&](int64_t n, int64_t o, int64_t oy, int64_t ox, int64_t ci, int64_t c, int64_t i, int64_t j,
                       int64_t iy, int64_t ix) {
    const double p = at(gy, {n, o, oy, ox}) * at(w, {o, c, i, j});
    const int64_t k = ((n * d.c + ci) * d.h + iy) * d.w + ix;
    e.value[k] += p;
    e.scale[k] += std::fabs(p);
  });
  return e;
}

Expected reference_backward_weight(const Tensor& gy, const Tensor& x, const Shape& ws, const Conv2dOptions& opt) {
  const Dims d = dims(x.shape(), ws, opt);
  Expected e{ws, std::vector<double>(shape_numel(ws), 0.0), std::vector<double>(shape_numel(ws), 0.0)};
  for_each_term(d, [&](int64_t n, int64_t o, int64_t oy, int64_t ox, int64_t ci, int64_t c, int64_t i, int64_t j,
                       int64_t iy, int64_t ix) {
    const double p = at(gy, {n, o, oy, ox}) * at(x, {n, ci, iy, ix});
    const int64_t k = ((o * ws[1] + c) * d.kh + i) * d.kw + j;
    e.value[k] += p;
    e.scale[k] += std::fabs(p);
  });
  return e;
}

// Within rtol(dtype) * (1 + sqrt(terms)/4) * sum|terms| per element (+ an absolute floor).
void check_scaled(const Tensor& out, const Expected& e, DType dt, int64_t terms, const std::string& what) {
  REQUIRE_MESSAGE(out.shape() == e.shape, what, ": shape ", out.shape(), ", expected ", e.shape);
  CHECK(out.dtype() == dt);
  CHECK(out.is_contiguous());
  const auto got = test::values(out);
  const double rtol = test::rtol_for(dt) * (1.0 + std::sqrt(double(terms)) / 4.0);
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = rtol * e.scale[i] + 1e-30;
    if (!(std::fabs(got[i] - e.value[i]) <= tol)) {
      FAIL_CHECK(what, ": element ", i, " is ", got[i], ", expected ", e.value[i], " (tol ", tol, ")");
      return;
    }
  }
}

struct Case {
  Shape x, w;
  Conv2dOptions opt;
  const char* name;
};

std::vector<Case> cases() {
  return {
      {{2, 3, 7, 7}, {4, 3, 3, 3}, Conv2dOptions(), "3x3 plain"},
      {{2, 3, 9, 8}, {5, 3, 3, 3}, Conv2dOptions().stride(2).padding(1), "stride 2 pad 1"},
      {{1, 2, 11, 9}, {3, 2, 3, 2}, Conv2dOptions().dilation({2, 3}).padding({2, 1}), "dilation, rect kernel"},
      {{2, 4, 7, 6}, {6, 2, 3, 3}, Conv2dOptions().groups(2).padding(1), "groups 2"},
      {{2, 4, 6, 7}, {4, 1, 3, 3}, Conv2dOptions().groups(4).stride({1, 2}), "depthwise"},
      {{3, 5, 6, 7}, {7, 5, 1, 1}, Conv2dOptions(), "1x1 (columns are the image)"},
      {{2, 3, 5, 5}, {2, 3, 1, 1}, Conv2dOptions().stride(2), "1x1 stride 2"},
      {{1, 2, 33, 7}, {3, 2, 5, 7}, Conv2dOptions().padding({0, 1}).stride(3), "kernel nearly the input"},
      {{2, 1, 4, 4}, {2, 1, 4, 4}, Conv2dOptions(), "kernel = input"},
  };
}

const DType kFloating[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

double dot(const Tensor& a, const Tensor& b) {
  const auto va = test::values(a), vb = test::values(b);
  REQUIRE(va.size() == vb.size());
  double s = 0;
  for (size_t i = 0; i < va.size(); ++i) s += va[i] * vb[i];
  return s;
}

}  // namespace

TEST_CASE("conv2d forward matches the loop reference: every dtype, stride, padding, dilation, groups") {
  uint64_t seed = 1;
  for (DType dt : kFloating)
    for (const Case& c : cases()) {
      Tensor x = test::random(c.x, dt, seed++), w = test::random(c.w, dt, seed++);
      Tensor b = test::random({c.w[0]}, dt, seed++);
      const int64_t terms = c.w[1] * c.w[2] * c.w[3];
      const std::string what = detail::str_cat(dt, " ", c.name);
      check_scaled(ops::conv2d(x, w, b, c.opt), reference_conv(x, w, b, c.opt), dt, terms, what);
      check_scaled(ops::conv2d(x, w, Tensor(), c.opt), reference_conv(x, w, Tensor(), c.opt), dt, terms,
                   what + " no bias");
    }
}

TEST_CASE("conv2d on strided views: channels-last input, stepped weight") {
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor x = test::random({2, 9, 8, 3}, dt, 5).permute({0, 3, 1, 2});   // (2, 3, 9, 8), channels last
    Tensor w = test::random({4, 3, 6, 3}, dt, 6).slice(2, 0, 6, 2);       // (4, 3, 3, 3), stepped
    Conv2dOptions opt = Conv2dOptions().padding(1).stride({2, 1});
    check_scaled(ops::conv2d(x, w, Tensor(), opt), reference_conv(x, w, Tensor(), opt), dt, 27,
                 detail::str_cat(dt, " strided"));
  }
}

TEST_CASE("conv2d backward kernels match direct loops") {
  uint64_t seed = 100;
  for (DType dt : {DType::f32, DType::f64, DType::bf16})
    for (const Case& c : cases()) {
      Tensor x = test::random(c.x, dt, seed++), w = test::random(c.w, dt, seed++);
      const Dims d = dims(c.x, c.w, c.opt);
      Tensor gy = test::random({d.n, d.o, d.oh, d.ow}, dt, seed++);
      const std::string what = detail::str_cat(dt, " ", c.name);
      check_scaled(ops::conv2d_backward_input(gy, w, c.x, c.opt), reference_backward_input(gy, w, c.x, c.opt), dt,
                   d.o / d.groups * d.kh * d.kw, what + " grad input");
      check_scaled(ops::conv2d_backward_weight(gy, x, c.w, c.opt), reference_backward_weight(gy, x, c.w, c.opt),
                   dt, d.n * d.oh * d.ow, what + " grad weight");
      std::vector<double> gb(d.o, 0.0), scale(d.o, 0.0);
      test::for_each_index(gy.shape(), [&](const std::vector<int64_t>& i) {
        gb[i[1]] += at(gy, i);
        scale[i[1]] += std::fabs(at(gy, i));
      });
      check_scaled(ops::conv2d_backward_bias(gy), Expected{{d.o}, gb, scale}, dt, 1, what + " grad bias");
    }
  // A non-contiguous grad_out (transposed view of a channels-last buffer).
  Tensor gy = test::random({2, 5, 5, 4}, DType::f32, 7).permute({0, 3, 1, 2});  // (2, 4, 5, 5)
  Tensor w = test::random({4, 3, 3, 3}, DType::f32, 8);
  Conv2dOptions opt = Conv2dOptions().padding(1);
  check_scaled(ops::conv2d_backward_input(gy, w, {2, 3, 5, 5}, opt),
               reference_backward_input(gy, w, {2, 3, 5, 5}, opt), DType::f32, 36, "strided grad_out");
}

TEST_CASE("the backward kernels are the adjoints of the forward map") {
  uint64_t seed = 200;
  for (const Case& c : cases()) {
    Tensor x = test::random(c.x, DType::f64, seed++), w = test::random(c.w, DType::f64, seed++);
    const Dims d = dims(c.x, c.w, c.opt);
    Tensor g = test::random({d.n, d.o, d.oh, d.ow}, DType::f64, seed++);
    const double lhs = dot(ops::conv2d(x, w, Tensor(), c.opt), g);
    const double rhs_x = dot(x, ops::conv2d_backward_input(g, w, c.x, c.opt));
    const double rhs_w = dot(w, ops::conv2d_backward_weight(g, x, c.w, c.opt));
    CHECK_MESSAGE(std::fabs(lhs - rhs_x) <= 1e-10 * (1 + std::fabs(lhs)), c.name, ": ", lhs, " vs ", rhs_x);
    CHECK_MESSAGE(std::fabs(lhs - rhs_w) <= 1e-10 * (1 + std::fabs(lhs)), c.name, ": ", lhs, " vs ", rhs_w);
    // The bias gradient is the adjoint of adding a bias: <bias broadcast, g> == <bias, sum g>.
    Tensor b = test::random({d.o}, DType::f64, seed++);
    const double with_bias = dot(ops::conv2d(x, w, b, c.opt), g) - lhs;
    CHECK(with_bias == doctest::Approx(dot(b, ops::conv2d_backward_bias(g))).epsilon(1e-10));
  }
}

TEST_CASE("im2col matches a direct gather and col2im is its adjoint") {
  for (DType dt : {DType::f32, DType::f64, DType::f16}) {
    Tensor x = test::random({3, 7, 6}, dt, 31).transpose(1, 2).contiguous().transpose(1, 2);  // strided (3, 7, 6)
    Conv2dOptions opt = Conv2dOptions().stride({2, 1}).padding({1, 2}).dilation({1, 2});
    Tensor cols = ops::im2col(x, {3, 2}, opt);
    const int64_t oh = (7 + 2 - 3) / 2 + 1, ow = (6 + 4 - 2 * 1 - 1) / 1 + 1;
    REQUIRE(cols.shape() == Shape{3 * 3 * 2, oh * ow});
    std::vector<double> expected;
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 2; ++j)
          for (int64_t oy = 0; oy < oh; ++oy)
            for (int64_t ox = 0; ox < ow; ++ox) {
              const int64_t iy = oy * 2 - 1 + i, ix = ox - 2 + j * 2;
              expected.push_back((iy >= 0 && iy < 7 && ix >= 0 && ix < 6) ? at(x, {c, iy, ix}) : 0.0);
            }
    test::check_close(cols, expected, 0, 0, detail::str_cat(dt, " im2col"));
    Tensor r = test::random(cols.shape(), DType::f64, 32);
    Tensor xd = x.to(DType::f64);
    const double lhs = dot(ops::im2col(xd, {3, 2}, opt), r), rhs = dot(xd, ops::col2im(r, {3, 7, 6}, {3, 2}, opt));
    CHECK(lhs == doctest::Approx(rhs).epsilon(1e-12));
  }
}

TEST_CASE("conv results do not depend on the thread count") {
  Tensor x = test::random({20, 3, 9, 9}, DType::f32, 41), w = test::random({8, 3, 3, 3}, DType::f32, 42);
  Tensor gy = test::random({20, 8, 9, 9}, DType::f32, 43);
  Conv2dOptions opt = Conv2dOptions().padding(1);
  const int saved = num_threads();
  // The plain kernels give the same bits for any thread count; oneDNN's may differ in the last bits
  // (Note [oneDNN convolutions] in core/cpu/conv.cpp) and gives the same bits for the same count.
  const bool onednn = cpu::onednn_enabled();
  std::vector<std::vector<double>> runs[3];
  for (int t = 0; t < 3; ++t) {
    set_num_threads(t == 0 ? 1 : std::max(2, saved));
    runs[t] = {test::values(ops::conv2d(x, w, Tensor(), opt)),
               test::values(ops::conv2d_backward_input(gy, w, x.shape(), opt)),
               test::values(ops::conv2d_backward_weight(gy, x, w.shape(), opt)),
               test::values(ops::conv2d_backward_bias(gy))};
  }
  set_num_threads(saved);
  for (int k = 0; k < 4; ++k) {
    CHECK_MESSAGE(runs[1][k] == runs[2][k], "result ", k, " repeated");
    if (onednn && k < 3)
      test::check_close(runs[1][k], runs[0][k], 1e-5, 1e-3, detail::str_cat("result ", k, " (oneDNN), 1 vs many threads"));
    else
      CHECK_MESSAGE(runs[0][k] == runs[1][k], "result ", k);
  }
}

TEST_CASE("bad conv arguments name the values") {
  Tensor x = test::random({2, 3, 8, 8}), w = test::random({4, 3, 3, 3});
  CHECK_ERROR_CONTAINS(ops::conv2d(x, test::random({4, 2, 3, 3})), "conv2d", "[2, 3, 8, 8]", "[4, 2, 3, 3]",
                       "channels");
  CHECK_ERROR_CONTAINS(ops::conv2d(x, test::random({4, 3, 9, 3})), "conv2d", "larger than the padded input",
                       "(8, 8)");
  CHECK(ops::conv2d(x, test::random({4, 3, 9, 3}), Tensor(), Conv2dOptions().padding(1)).shape() ==
        Shape{2, 4, 2, 8});
  CHECK_ERROR_CONTAINS(ops::conv2d(x, test::random({4, 1, 3, 3}), Tensor(), Conv2dOptions().groups(2)), "groups 2",
                       "3 channels");
  CHECK_ERROR_CONTAINS(ops::conv2d(test::random({2, 4, 8, 8}), test::random({3, 2, 3, 3}), Tensor(),
                                   Conv2dOptions().groups(2)),
                       "groups 2", "3 output channels");
  CHECK_ERROR_CONTAINS(ops::conv2d(test::random({3, 8, 8}), w), "conv2d", "(N, C, H, W)", "[3, 8, 8]");
  CHECK_ERROR_CONTAINS(ops::conv2d(x.to(DType::i64), w.to(DType::i64)), "conv2d", "i64");
  CHECK_ERROR_CONTAINS(ops::conv2d(x, w.to(DType::f64)), "conv2d", "f64", "f32");
  CHECK_ERROR_CONTAINS(ops::conv2d(x, w, test::random({3})), "conv2d", "bias", "[4]", "[3]");
  CHECK_ERROR_CONTAINS(ops::conv2d(x, w, Tensor(), Conv2dOptions().stride(0)), "stride", "(0, 0)");
  CHECK_ERROR_CONTAINS(ops::conv2d_backward_input(test::random({2, 4, 5, 5}), w, x.shape()), "grad_out",
                       "[2, 4, 5, 5]", "[2, 4, 6, 6]");
  CHECK_ERROR_CONTAINS(ops::col2im(test::random({27, 5}), {3, 8, 8}, 3), "col2im", "[27, 5]", "[27, 36]");
}
