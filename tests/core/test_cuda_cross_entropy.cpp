// The fused cross-entropy ops and kiln::cross_entropy on CUDA against the CPU: every floating
// dtype, rows of 1 .. 50257 classes, i64 and i32 targets, ignored rows, label smoothing, per-row
// and broadcast upstream gradients, non-contiguous logits, rows at any offset from a 16-byte
// boundary, out-of-range targets, every reduction
// through autograd, padded rows read in place (CrossEntropyOptions::classes), and a GPT-2-sized
// (8192, 50257) bf16 batch; each in every form of the kernels (cuda::CrossEntropyKernel). Skipped
// (exit 77) without a device.
#include <limits>

#include "test_util.h"

using namespace kiln;

namespace {

const cuda::CrossEntropyKernel kForms[] = {cuda::CrossEntropyKernel::accurate, cuda::CrossEntropyKernel::fast,
                                           cuda::CrossEntropyKernel::registers};

// Sets the kernels' form for a scope.
struct FormGuard {
  cuda::CrossEntropyKernel before = cuda::cross_entropy_kernel();
  explicit FormGuard(cuda::CrossEntropyKernel form) { cuda::set_cross_entropy_kernel(form); }
  ~FormGuard() { cuda::set_cross_entropy_kernel(before); }
  FormGuard(const FormGuard&) = delete;
  FormGuard& operator=(const FormGuard&) = delete;
};

Tensor ids(const std::vector<int64_t>& v, DType dt = DType::i64) {
  return from_vector(v, {static_cast<int64_t>(v.size())}).to(dt);
}

// n targets in [0, c), every third row ignore_index.
std::vector<int64_t> make_targets(int64_t n, int64_t c, int64_t ignore, uint64_t seed) {
  std::vector<double> u = test::values(test::random({n}, DType::f64, seed, 0, double(c)));
  std::vector<int64_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(i % 3 == 1 ? ignore : std::min<int64_t>(c - 1, int64_t(u[i])));
  return t;
}

void check_ops(int64_t n, int64_t c, DType dt, DType index_dt, double ls, bool strided) {
  CAPTURE(n);
  CAPTURE(c);
  CAPTURE(dt);
  CAPTURE(index_dt);
  CAPTURE(ls);
  CAPTURE(strided);
  const double rtol = test::cuda_rtol(dt);
  const double loss_tol = dt == DType::f64 ? 1e-10 : 1e-5;  // both compute from the same stored logits
  Tensor x = test::random({n, c}, dt, uint64_t(n * 7 + c), -5, 5);
  Tensor t = ids(make_targets(n, c, -100, uint64_t(c)), index_dt);
  ops::CrossEntropyResult want = ops::cross_entropy_forward(x, t, -100, ls);
  ops::CrossEntropyResult got = ops::cross_entropy_forward(test::to_cuda(x, strided), test::to_cuda(t, strided), -100, ls);
  CHECK(got.count.device().is_cuda());
  CHECK(got.count.dtype() == DType::i64);
  CHECK(got.count.item() == want.count.item());
  test::check_cuda_matches(got.loss, want.loss, loss_tol, loss_tol, "loss");
  test::check_cuda_matches(got.lse, want.lse, loss_tol, loss_tol, "lse");

  // Per-row upstream gradient (reduction none), then one value for all rows (sum / mean). Both
  // backward passes get the CPU's lse.
  const DType ldt = dt == DType::f64 ? DType::f64 : DType::f32;
  Tensor g = test::random({n}, ldt, 3, 0.5, 2);
  Tensor d_want = ops::cross_entropy_backward(g, x, t, want.lse, -100, ls);
  Tensor d_got = ops::cross_entropy_backward(test::to_cuda(g), test::to_cuda(x, strided), test::to_cuda(t, strided),
                                             want.lse.to(Device::cuda()), -100, ls);
  test::check_cuda_matches(d_got, d_want, rtol, rtol * 1e-2, "dlogits");
  const double scale = 1.0 / std::max(1.0, want.count.item());
  Tensor one = scalar_tensor(0.75, ldt);
  Tensor m_want = ops::cross_entropy_backward(one, x, t, want.lse, -100, ls, scale);
  Tensor m_got = ops::cross_entropy_backward(one.to(Device::cuda()), test::to_cuda(x, strided),
                                             test::to_cuda(t, strided), want.lse.to(Device::cuda()), -100, ls, scale);
  test::check_cuda_matches(m_got, m_want, rtol, rtol * 1e-2, "dlogits, one upstream value");
  if (want.count.item() > 0) {
    // The mean's divisor read on the device (the count tensor) against the CPU's host division.
    Tensor c_want = ops::cross_entropy_backward(one, x, t, want.lse, -100, ls, 0.5, want.count);
    Tensor c_got = ops::cross_entropy_backward(one.to(Device::cuda()), test::to_cuda(x, strided),
                                               test::to_cuda(t, strided), want.lse.to(Device::cuda()), -100, ls, 0.5,
                                               got.count);
    test::check_cuda_matches(c_got, c_want, rtol, rtol * 1e-2, "dlogits, scale times 1 / the device count");
  }
}

}  // namespace

TEST_CASE("CUDA cross_entropy ops match the CPU for every row length, dtype and target dtype") {
  test::require_cuda();
  for (cuda::CrossEntropyKernel form : kForms) {
    CAPTURE(cuda::cross_entropy_kernel_name(form));
    FormGuard guard(form);
    for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16})
      // 70001: past the registers form's 16-bit rows (f32 from 28,673, f64 from 14,337 values)
      for (int64_t c : {1, 7, 32, 1000, 1025, 4096, 50257, 70001})
        for (double ls : {0.0, 0.1}) check_ops(c > 4096 ? 4 : 29, c, dt, ls > 0 ? DType::i32 : DType::i64, ls, false);
  }
}

TEST_CASE("CUDA cross_entropy ops: non-contiguous logits and targets, custom ignore_index") {
  test::require_cuda();
  for (cuda::CrossEntropyKernel form : kForms) {
    CAPTURE(cuda::cross_entropy_kernel_name(form));
    FormGuard guard(form);
    check_ops(17, 1000, DType::bf16, DType::i64, 0.0, true);
    check_ops(17, 33, DType::f32, DType::i32, 0.2, true);
  }
  // ignore_index inside [0, C): those rows are skipped, the rest counted.
  Tensor x = test::random({6, 5}, DType::f32, 9);
  Tensor t = ids({2, 2, 0, 4, 2, 1});
  ops::CrossEntropyResult want = ops::cross_entropy_forward(x, t, 2, 0.0);
  ops::CrossEntropyResult got = ops::cross_entropy_forward(x.to(Device::cuda()), t.to(Device::cuda()), 2, 0.0);
  CHECK(got.count.item() == 3);
  test::check_cuda_matches(got.loss, want.loss, 1e-5, 1e-5, "ignore_index 2");
}

TEST_CASE("CUDA cross_entropy ops: rows at any offset from a 16-byte boundary (Note [Unaligned rows])") {
  test::require_cuda();
  // A batch narrowed from a larger one starts c elements into its storage: with c odd, the first row
  // (and every other row) is misaligned, and the backward's fresh dlogits sits at another offset.
  for (cuda::CrossEntropyKernel form : kForms)
  for (DType dt : {DType::f32, DType::bf16})
    for (int64_t c : {7, 1025, 50257}) {
      CAPTURE(cuda::cross_entropy_kernel_name(form));
      FormGuard guard(form);
      CAPTURE(dt);
      CAPTURE(c);
      const int64_t n = c > 4096 ? 5 : 23;
      Tensor whole = test::random({n + 1, c}, dt, uint64_t(c) + 11, -5, 5);
      Tensor x = whole.narrow(0, 1, n), xg = whole.to(Device::cuda()).narrow(0, 1, n);
      REQUIRE(xg.is_contiguous());
      Tensor t = ids(make_targets(n, c, -100, uint64_t(c) + 5));
      ops::CrossEntropyResult want = ops::cross_entropy_forward(x, t, -100, 0.1);
      ops::CrossEntropyResult got = ops::cross_entropy_forward(xg, t.to(Device::cuda()), -100, 0.1);
      test::check_cuda_matches(got.loss, want.loss, 1e-5, 1e-5, "loss");
      test::check_cuda_matches(got.lse, want.lse, 1e-5, 1e-5, "lse");
      Tensor g = test::random({n}, DType::f32, 4, 0.5, 2);
      Tensor d_want = ops::cross_entropy_backward(g, x, t, want.lse, -100, 0.1);
      Tensor d_got = ops::cross_entropy_backward(g.to(Device::cuda()), xg, t.to(Device::cuda()),
                                                 want.lse.to(Device::cuda()), -100, 0.1);
      const double rtol = test::cuda_rtol(dt);
      test::check_cuda_matches(d_got, d_want, rtol, rtol * 1e-2, "dlogits");
    }
}

TEST_CASE("CUDA cross_entropy ops: special values and ignored rows") {
  test::require_cuda();
  for (cuda::CrossEntropyKernel form : kForms) {
  CAPTURE(cuda::cross_entropy_kernel_name(form));
  FormGuard guard(form);
  const double inf = std::numeric_limits<double>::infinity();
  Tensor x = from_vector(std::vector<double>{-inf, 1, 2, -inf, -inf, -inf, 1, NAN, 0, 3, 1, 2}, {4, 3});
  Tensor t = ids({1, 0, 2, -100});
  ops::CrossEntropyResult want = ops::cross_entropy_forward(x, t);
  ops::CrossEntropyResult got = ops::cross_entropy_forward(x.to(Device::cuda()), t.to(Device::cuda()));
  test::check_cuda_matches(got.loss, want.loss, 1e-5, 1e-5, "special values");
  Tensor d = ops::cross_entropy_backward(ones({4}).to(Device::cuda()), x.to(Device::cuda()), t.to(Device::cuda()),
                                         got.lse);
  std::vector<double> dv = test::values(d);
  CHECK(dv[0] == 0.0);                                      // exp(-inf - lse)
  CHECK(dv[9] == 0.0);                                      // the ignored row
  CHECK(dv[10] == 0.0);
  CHECK(dv[11] == 0.0);
  // Every row ignored: count 0, a mean's scale of 1/0 still gives zeros.
  Tensor all = ids({-100, -100, -100, -100}).to(Device::cuda());
  ops::CrossEntropyResult none = ops::cross_entropy_forward(x.to(Device::cuda()), all);
  CHECK(none.count.item() == 0);
  Tensor dz = ops::cross_entropy_backward(scalar_tensor(1.0).to(Device::cuda()), x.to(Device::cuda()), all, none.lse,
                                          -100, 0.0, INFINITY);
  CHECK(test::values(dz) == std::vector<double>(12, 0.0));
  }
}

TEST_CASE("CUDA cross_entropy ops: special values in a row's head, body and tail, every form, f32 and bf16") {
  test::require_cuda();
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t n = 8, c = 1031;  // a block per row; rows start at every offset from a 16-byte boundary
  std::vector<double> v = test::values(test::random({n * c + 1}, DType::f64, 51, -3, 3));
  auto at = [&](int64_t r, int64_t j) -> double& { return v[size_t(1 + r * c + j)]; };
  at(0, 500) = NAN;                             // NaN in the body
  at(1, 600) = inf;                             // +inf: lse NaN, as the CPU's exp(inf - inf)
  at(2, 0) = -inf;                              // -inf in the head (or the first vector) and the body
  at(2, 700) = -inf;
  for (int64_t j = 0; j < c; ++j) at(3, j) = -inf;  // a row of -inf: lse NaN, as the CPU (first GPU run: -inf)
  at(4, c - 1) = NAN;                           // NaN as the last element (the tail where there is one)
  at(5, 0) = inf;                               // +inf as the first element
  at(6, c - 1) = 40;                            // a large max at the end
  Tensor t = ids({3, 5, 1, 2, 9, 10, 0, c - 1});
  for (cuda::CrossEntropyKernel form : kForms)
    for (DType dt : {DType::f32, DType::bf16}) {
      CAPTURE(cuda::cross_entropy_kernel_name(form));
      CAPTURE(dt);
      FormGuard guard(form);
      Tensor whole = from_vector(v, {n * c + 1}).to(dt);
      Tensor x = whole.narrow(0, 1, n * c).view({n, c});
      Tensor xg = whole.to(Device::cuda()).narrow(0, 1, n * c).view({n, c});
      ops::CrossEntropyResult want = ops::cross_entropy_forward(x, t, -100, 0.1);
      ops::CrossEntropyResult got = ops::cross_entropy_forward(xg, t.to(Device::cuda()), -100, 0.1);
      test::check_cuda_matches(got.loss, want.loss, 1e-5, 1e-5, "loss");
      test::check_cuda_matches(got.lse, want.lse, 1e-5, 1e-5, "lse");
      Tensor g = ones({n}, DType::f32);
      Tensor d_want = ops::cross_entropy_backward(g, x, t, want.lse, -100, 0.1);
      Tensor d_got = ops::cross_entropy_backward(g.to(Device::cuda()), xg, t.to(Device::cuda()),
                                                 want.lse.to(Device::cuda()), -100, 0.1);
      test::check_cuda_matches(d_got, d_want, test::cuda_rtol(dt), 1e-4, "dlogits");
    }
}

TEST_CASE("CUDA cross_entropy: the first C columns of padded rows read in place, the gradient padded with zeros") {
  test::require_cuda();
  // GPT-2's vocabulary padded as GPT pads it (16-byte aligned rows), and an odd padding (rows at
  // every offset from a boundary), through the ops and through kiln::cross_entropy's classes.
  for (cuda::CrossEntropyKernel form : kForms)
    for (auto [c, padded] : {std::pair<int64_t, int64_t>{50257, 50304}, {1025, 1031}, {7, 8}}) {
      CAPTURE(cuda::cross_entropy_kernel_name(form));
      CAPTURE(c);
      FormGuard guard(form);
      const int64_t n = c > 4096 ? 5 : 23;
      Tensor wide = test::random({n, padded}, DType::bf16, uint64_t(c) + 21, -5, 5);
      Tensor x = wide.narrow(1, 0, c), xg = wide.to(Device::cuda()).narrow(1, 0, c);
      Tensor t = ids(make_targets(n, c, -100, uint64_t(c) + 22));
      ops::CrossEntropyResult want = ops::cross_entropy_forward(x, t, -100, 0.1);
      ops::CrossEntropyResult got = ops::cross_entropy_forward(xg, t.to(Device::cuda()), -100, 0.1);
      test::check_cuda_matches(got.loss, want.loss, 1e-5, 1e-5, "loss");
      Tensor g = test::random({n}, DType::f32, 23, 0.5, 2);
      Tensor d_want = ops::cross_entropy_backward(g, x, t, want.lse, -100, 0.1, 1.0, {}, padded);
      Tensor d_got = ops::cross_entropy_backward(g.to(Device::cuda()), xg, t.to(Device::cuda()),
                                                 want.lse.to(Device::cuda()), -100, 0.1, 1.0, {}, padded);
      REQUIRE(d_got.shape() == Shape{n, padded});
      test::check_cuda_matches(d_got, d_want, test::cuda_rtol(DType::bf16), 1e-4, "dlogits");
      CHECK(test::values(d_got.narrow(1, c, padded - c)) == std::vector<double>(n * (padded - c), 0.0));
      // Autograd: classes on the device against the CPU's slice.
      Tensor a = wide.view({1, n, padded}).detach().requires_grad_();
      Tensor b = wide.to(Device::cuda()).view({1, n, padded}).detach().requires_grad_();
      Tensor la = cross_entropy(a.slice(2, 0, c), t.view({1, n}));
      Tensor lb = cross_entropy(b, t.to(Device::cuda()).view({1, n}), CrossEntropyOptions().classes(c));
      test::check_cuda_matches(lb, la, 1e-2, 1e-5, "autograd loss");
      la.backward();
      lb.backward();
      test::check_cuda_matches(b.grad(), a.grad(), test::cuda_rtol(DType::bf16), 1e-4, "autograd grad");
    }
  // f32 rows padded by an odd count (row heads of 4, 8 and 12 bytes), the gradient written element by
  // element, and a target among the padded columns: out of range for `classes`.
  Tensor wide = test::random({9, 1030}, DType::f32, 52, -5, 5);
  Tensor t = ids(make_targets(9, 1025, -100, 53));
  ops::CrossEntropyResult want = ops::cross_entropy_forward(wide.narrow(1, 0, 1025), t, -100, 0.0);
  Tensor wg = wide.to(Device::cuda());
  ops::CrossEntropyResult got = ops::cross_entropy_forward(wg.narrow(1, 0, 1025), t.to(Device::cuda()), -100, 0.0);
  test::check_cuda_matches(got.loss, want.loss, 1e-5, 1e-5, "f32 padded loss");
  Tensor g = test::random({9}, DType::f32, 54, 0.5, 2);
  Tensor d_want = ops::cross_entropy_backward(g, wide.narrow(1, 0, 1025), t, want.lse, -100, 0.0, 1.0, {}, 1030);
  Tensor d_got = ops::cross_entropy_backward(g.to(Device::cuda()), wg.narrow(1, 0, 1025), t.to(Device::cuda()),
                                             want.lse.to(Device::cuda()), -100, 0.0, 1.0, {}, 1030);
  test::check_cuda_matches(d_got, d_want, test::cuda_rtol(DType::f32), 1e-7, "f32 padded dlogits");
  Tensor bad = ids({0, 1, 1027, 2, 3, 4, 5, 6, 7}).to(Device::cuda());
  const cuda::CheckMode mode = cuda::check_mode();
  cuda::set_check_mode(cuda::CheckMode::immediate);
  CHECK_ERROR_CONTAINS(cross_entropy(wg, bad, CrossEntropyOptions().classes(1025)), "target 1027", "row 2",
                       "1025 classes");
  cuda::set_check_mode(mode);
}

TEST_CASE("CUDA cross_entropy: an out-of-range target names its value and row, immediately or deferred") {
  test::require_cuda();
  Tensor x = test::random({5, 4}, DType::f32, 10).to(Device::cuda());
  Tensor bad64 = ids({0, 1, 2, 9, -3}).to(Device::cuda()), bad32 = ids({0, -2, 2, 3, 1}, DType::i32).to(Device::cuda());
  // Immediate: the op itself throws, with the CPU's message.
  cuda::set_check_mode(cuda::CheckMode::immediate);
  CHECK_ERROR_CONTAINS(ops::cross_entropy_forward(x, bad64), "cross_entropy", "target 9", "row 3", "4 classes");
  CHECK_ERROR_CONTAINS(ops::cross_entropy_forward(x, bad32), "target -2", "row 1");
  // Deferred (Note [Deferred device checks]): the op returns without a host sync; the same message,
  // marked late, comes at the next check (or the next blocking read from the device).
  cuda::set_check_mode(cuda::CheckMode::deferred);
  const int64_t syncs = cuda::host_sync_count();
  ops::CrossEntropyResult r = ops::cross_entropy_forward(x, bad64);
  CHECK(cuda::host_sync_count() == syncs);
  CHECK(cuda::deferred_faults_pending() == 1);
  CHECK_ERROR_CONTAINS(cuda::check_deferred_faults(/*wait=*/true), "cross_entropy", "target 9", "row 3",
                       "4 classes", "reported late");
  CHECK(cuda::deferred_faults_pending() == 0);
  (void)ops::cross_entropy_forward(x, bad32);
  CHECK_ERROR_CONTAINS(r.loss.to(Device::cpu()), "target -2", "row 1", "reported late");
  CHECK_ERROR_CONTAINS(ops::cross_entropy_forward(x, ids({0, 1, 2, 3, 1})), "cross_entropy", "cuda:0", "cpu");
  // The device is still usable afterwards, and a good batch leaves nothing to report.
  CHECK(ops::cross_entropy_forward(x, ids({0, 1, 2, 3, 1}).to(Device::cuda())).count.item() == 5);
  cuda::check_deferred_faults(/*wait=*/true);
}

TEST_CASE("CUDA kiln::cross_entropy with a mean reduction reads nothing back") {
  test::require_cuda();
  Tensor x = test::random({6, 7}, DType::f32, 19).to(Device::cuda()).detach().requires_grad_();
  Tensor t = ids({0, -100, 6, 3, -100, 1}).to(Device::cuda());
  const int64_t syncs = cuda::host_sync_count();
  Tensor loss = cross_entropy(x, t);
  loss.backward();
  CHECK(cuda::host_sync_count() == syncs);
  Tensor xc = x.detach().to(Device::cpu()).requires_grad_();
  Tensor lc = cross_entropy(xc, t.to(Device::cpu()));
  lc.backward();
  test::check_cuda_matches(loss.detach(), lc.detach(), 1e-6, 1e-6, "mean over the 4 counted rows");
  test::check_cuda_matches(x.grad(), xc.grad(), 1e-5, 1e-7, "grad");
}

TEST_CASE("CUDA kiln::cross_entropy matches the CPU for every reduction, forward and backward") {
  test::require_cuda();
  const std::pair<const char*, Reduction> reductions[] = {
      {"none", Reduction::none}, {"mean", Reduction::mean}, {"sum", Reduction::sum}};
  for (DType dt : {DType::f32, DType::bf16}) {
    for (auto& [name, r] : reductions) {
      CAPTURE(dt);
      CAPTURE(name);
      Tensor x_cpu = test::random({2, 5, 300}, dt, 12, -4, 4);
      Tensor t_cpu = ids(make_targets(10, 300, -100, 13)).view({2, 5});
      auto opts = CrossEntropyOptions().reduction(r).label_smoothing(0.05);
      Tensor a = x_cpu.detach().requires_grad_();
      Tensor b = x_cpu.to(Device::cuda()).detach().requires_grad_();
      Tensor la = cross_entropy(a, t_cpu, opts), lb = cross_entropy(b, t_cpu.to(Device::cuda()), opts);
      const double rtol = test::cuda_rtol(dt);
      test::check_cuda_matches(lb, la, rtol, rtol, "loss");
      Tensor up = r == Reduction::none ? test::random({2, 5}, dt, 14) : scalar_tensor(1.5, dt);
      la.backward(up);
      lb.backward(up.to(Device::cuda()));
      test::check_cuda_matches(b.grad(), a.grad(), rtol, rtol * 1e-2, "grad");
    }
  }
  // Under autocast, 16-bit logits give an f32 loss and a 16-bit gradient, without an f32 copy.
  Tensor x = test::random({8, 50}, DType::bf16, 15).to(Device::cuda()).detach().requires_grad_();
  AutocastGuard guard(DType::bf16);
  Tensor loss = cross_entropy(x, ids(make_targets(8, 50, -100, 16)).to(Device::cuda()));
  CHECK(loss.dtype() == DType::f32);
  loss.backward();
  CHECK(x.grad().dtype() == DType::bf16);
}

TEST_CASE("CUDA cross_entropy on a GPT-2-sized (8192, 50257) bf16 batch") {
  test::require_cuda();
  const int64_t n = 8192, c = 50257;
  Tensor x_cpu = test::random({n, c}, DType::bf16, 17, -8, 8);
  const std::vector<int64_t> t = make_targets(n, c, -1, 18);
  Tensor x = x_cpu.to(Device::cuda());
  Tensor td = ids(t).to(Device::cuda());
  ops::CrossEntropyResult got = ops::cross_entropy_forward(x, td, -1, 0.0);
  CHECK(got.loss.shape() == Shape{n});
  CHECK(got.loss.dtype() == DType::f32);
  ops::CrossEntropyResult want = ops::cross_entropy_forward(x_cpu, ids(t), -1, 0.0);
  CHECK(got.count.item() == want.count.item());
  for (cuda::CrossEntropyKernel form : kForms) {
    CAPTURE(cuda::cross_entropy_kernel_name(form));
    FormGuard guard(form);
    got = ops::cross_entropy_forward(x, td, -1, 0.0);
    test::check_cuda_matches(got.loss, want.loss, 1e-5, 1e-5, "loss");
    Tensor d = ops::cross_entropy_backward(scalar_tensor(1.0).to(Device::cuda()), x, td, got.lse, -1, 0.0, 1.0,
                                           got.count);
    CHECK(d.dtype() == DType::bf16);
    CHECK(d.shape() == Shape{n, c});
    // Spot-check the first and last rows against the CPU (the whole CPU gradient is 400M values).
    for (int64_t r0 : {int64_t(0), n - 3}) {
      Tensor rows = x_cpu.narrow(0, r0, 3);
      Tensor tr = ids(std::vector<int64_t>(t.begin() + r0, t.begin() + r0 + 3));
      Tensor dw = ops::cross_entropy_backward(scalar_tensor(1.0), rows, tr, want.lse.narrow(0, r0, 3), -1, 0.0,
                                              1.0 / want.count.item());
      test::check_cuda_matches(d.narrow(0, r0, 3), dw, 1e-2, 1e-6, "dlogits rows");
    }
  }
}

TEST_CASE("KILN_CROSS_ENTROPY_KERNEL names a form; anything else is an error naming the choices") {
  CHECK(cuda::parse_cross_entropy_kernel("registers") == cuda::CrossEntropyKernel::registers);
  CHECK(std::string(cuda::cross_entropy_kernel_name(cuda::CrossEntropyKernel::fast)) == "fast");
  CHECK_ERROR_CONTAINS(cuda::parse_cross_entropy_kernel("quick"), "KILN_CROSS_ENTROPY_KERNEL", "'quick'",
                       "accurate, fast or registers");
}
