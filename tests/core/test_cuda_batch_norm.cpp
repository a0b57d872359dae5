// Batch norm on CUDA against the CPU kernels: training (statistics, output, running-stat update)
// and eval, with and without affine parameters, 2-D to 4-D inputs, one channel over many blocks
// and many channels, strided inputs, every floating dtype, running buffers of another dtype or
// strides, the three gradients, and the autograd op end to end. Skipped without a device.
#include "test_util.h"

#include <kiln/core/ops/batch_norm.h>

using namespace kiln;

namespace {

const DType kDtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

std::vector<Shape> shapes() {
  return {{7, 3}, {4, 3, 5}, {8, 16, 9, 9}, {32, 64, 32, 32}, {64, 1, 64, 64}, {2, 5, 1, 1}};
}

DType compute_dtype(DType dt) { return dt == DType::f64 ? DType::f64 : DType::f32; }

struct Params {
  Tensor weight, bias, running_mean, running_var;  // CPU
};

Params params(int64_t c, DType dt, bool affine, uint64_t seed) {
  Params p;
  if (affine) {
    p.weight = test::random({c}, dt, seed, 0.5, 2.0);
    p.bias = test::random({c}, dt, seed + 1, -1.0, 1.0);
  }
  p.running_mean = test::random({c}, dt, seed + 2, -1.0, 1.0);
  p.running_var = test::random({c}, dt, seed + 3, 0.5, 2.0);
  return p;
}

Tensor cuda_or_none(const Tensor& t, bool strided = false) { return t.defined() ? test::to_cuda(t, strided) : Tensor(); }

}  // namespace

TEST_CASE("batch_norm forward and backward match the CPU, training and eval") {
  test::require_cuda();
  uint64_t seed = 10;
  for (DType dt : kDtypes)
    for (const Shape& shape : shapes())
      for (bool training : {true, false})
        for (bool affine : {true, false}) {
          CAPTURE(dt);
          CAPTURE(shape);
          CAPTURE(training);
          CAPTURE(affine);
          const int64_t c = shape[1];
          const Tensor x = test::random(shape, dt, seed += 10, -1.0, 3.0);
          Params cpu = params(c, dt, affine, seed + 1);
          Params gpu{cuda_or_none(cpu.weight, true), cuda_or_none(cpu.bias), cuda_or_none(cpu.running_mean),
                     cuda_or_none(cpu.running_var)};
          const Tensor xd = test::to_cuda(x, /*strided=*/true);
          const double tol = test::cuda_rtol(dt), ctol = test::cuda_rtol(compute_dtype(dt));
          const ops::BatchNormResult rd =
              ops::batch_norm(xd, gpu.weight, gpu.bias, gpu.running_mean, gpu.running_var, training, 0.1, 1e-5);
          const ops::BatchNormResult r =
              ops::batch_norm(x, cpu.weight, cpu.bias, cpu.running_mean, cpu.running_var, training, 0.1, 1e-5);
          test::check_cuda_matches(rd.out, r.out, tol, -1, "out");
          test::check_cuda_matches(rd.mean, r.mean, ctol, -1, "mean");
          test::check_cuda_matches(rd.invstd, r.invstd, ctol, -1, "invstd");
          test::check_cuda_matches(gpu.running_mean, cpu.running_mean, tol, -1, "running_mean");
          test::check_cuda_matches(gpu.running_var, cpu.running_var, tol, -1, "running_var");

          const Tensor dy = test::random(shape, dt, seed + 5);
          const ops::BatchNormGrads gd =
              ops::batch_norm_backward(test::to_cuda(dy, true), xd, gpu.weight, rd.mean, rd.invstd, training,
                                       {true, affine, affine});
          const ops::BatchNormGrads g =
              ops::batch_norm_backward(dy, x, cpu.weight, r.mean, r.invstd, training, {true, affine, affine});
          // dx cancels three terms in training: the CPU's and the device's roundings of the
          // per-channel coefficients differ by an ulp, which the absolute tolerance absorbs.
          test::check_cuda_matches(gd.input, g.input, tol, 4 * tol, "dx");
          if (affine) {
            test::check_cuda_matches(gd.weight, g.weight, ctol, ctol, "dweight");
            test::check_cuda_matches(gd.bias, g.bias, ctol, ctol, "dbias");
          } else {
            CHECK(!gd.weight.defined());
            CHECK(!gd.bias.defined());
          }
        }
}

TEST_CASE("batch_norm updates running buffers of another dtype or with strides in place") {
  test::require_cuda();
  const Shape shape{6, 4, 5, 5};
  const Tensor x = test::random(shape, DType::bf16, 100, -1.0, 3.0);
  for (DType buffer_dtype : {DType::f32, DType::f64, DType::bf16}) {
    CAPTURE(buffer_dtype);
    Tensor rm = test::random({4}, buffer_dtype, 101), rv = test::random({4}, buffer_dtype, 102, 0.5, 2.0);
    Tensor rmd = test::to_cuda(rm, /*strided=*/true), rvd = test::to_cuda(rv, true);  // views with step 2
    ops::batch_norm(x, Tensor(), Tensor(), rm, rv, true, 0.3, 1e-5);
    ops::batch_norm(test::to_cuda(x), Tensor(), Tensor(), rmd, rvd, true, 0.3, 1e-5);
    CHECK(rmd.dtype() == buffer_dtype);
    CHECK(!rmd.is_contiguous());
    test::check_cuda_matches(rmd, rm, test::cuda_rtol(buffer_dtype), -1, "running_mean");
    test::check_cuda_matches(rvd, rv, test::cuda_rtol(buffer_dtype), -1, "running_var");
  }
}

TEST_CASE("the autograd batch_norm runs forward and backward on the device") {
  test::require_cuda();
  for (bool training : {true, false}) {
    CAPTURE(training);
    const Shape shape{8, 6, 7, 5};
    Tensor x = test::random(shape, DType::f32, 200), w = test::random({6}, DType::f32, 201, 0.5, 2.0);
    Tensor b = test::random({6}, DType::f32, 202);
    Tensor rm = zeros({6}), rv = ones({6});
    Tensor xd = test::to_cuda(x), wd = test::to_cuda(w), bd = test::to_cuda(b), rmd = test::to_cuda(rm),
           rvd = test::to_cuda(rv);
    for (Tensor* t : {&x, &w, &b, &xd, &wd, &bd}) t->requires_grad_();
    Tensor y = batch_norm(x, rm, rv, w, b, training), yd = batch_norm(xd, rmd, rvd, wd, bd, training);
    const Tensor g = test::random(shape, DType::f32, 203);
    y.backward(g);
    yd.backward(test::to_cuda(g));
    const double tol = 1e-5;
    test::check_cuda_matches(yd, y.detach(), tol, -1, "output");
    test::check_cuda_matches(rmd, rm, tol, -1, "running_mean");
    test::check_cuda_matches(rvd, rv, tol, -1, "running_var");
    test::check_cuda_matches(xd.grad(), x.grad(), tol, 4 * tol, "x.grad");
    test::check_cuda_matches(wd.grad(), w.grad(), tol, -1, "weight.grad");
    test::check_cuda_matches(bd.grad(), b.grad(), tol, -1, "bias.grad");
  }
}

TEST_CASE("batch_norm with operands on two devices names the devices") {
  test::require_cuda();
  const Tensor x = test::to_cuda(test::random({4, 3, 2}, DType::f32, 300));
  CHECK_ERROR_CONTAINS(ops::batch_norm(x, ones({3}), Tensor(), Tensor(), Tensor(), true), "batch_norm", "weight",
                       "cpu", "cuda:0");
}
