// CUDA index ops against the CPU path: index_select, gather, scatter_add(_), index_add_, embedding
// and embedding_backward in every dtype they take, strided inputs and indices, repeated indices,
// large sizes, out-of-range errors (message content, nothing written by in-place ops) and bitwise
// run-to-run stability of the sorted accumulations. Skipped (exit 77) without a usable device.
#include "test_util.h"

using namespace kiln;

namespace {

const DType kAnyTypes[] = {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i64, DType::i32, DType::b8};
const DType kNumeric[] = {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i64, DType::i32};

// Random indices in [0, n) on the CPU.
Tensor random_index(const Shape& shape, int64_t n, DType dt, uint64_t seed) {
  return test::random(shape, dt, seed, 0.0, double(n));
}

// The same values on the device laid out transposed in dims d0, d1 (a strided view).
Tensor transposed_on_device(const Tensor& cpu, int64_t d0, int64_t d1) {
  return cpu.transpose(d0, d1).contiguous().to(Device::cuda()).transpose(d0, d1);
}

// A 1-D device view with a step of 2 holding the values of `cpu`.
Tensor stepped_on_device(const Tensor& cpu) {
  Tensor wide = cpu.unsqueeze(1).expand({cpu.numel(), 2}).contiguous().flatten();  // each value twice
  return wide.to(Device::cuda()).slice(0, 0, 2 * cpu.numel(), 2);
}

}  // namespace

TEST_CASE("index_select matches the CPU for any dtype, dim, layout and index layout") {
  test::require_cuda();
  uint64_t seed = 10;
  for (DType dt : kAnyTypes) {
    Tensor base = test::random({4, 5, 6}, dt, ++seed, -50, 50);
    std::vector<std::pair<std::string, Tensor>> xs = {
        {"contiguous", base.to(Device::cuda())},
        {"transposed", transposed_on_device(base, 0, 2)},
        {"stepped", test::random({4, 10, 6}, dt, ++seed, -50, 50).to(Device::cuda()).slice(1, 0, 10, 2)}};
    for (auto& [layout, x] : xs) {
      Tensor xc = x.to(Device::cpu());
      for (int64_t dim : {0, 1, 2, -1}) {
        const int64_t d = dim < 0 ? dim + 3 : dim;
        for (DType it : {DType::i64, DType::i32}) {
          const std::string what = std::string(dtype_name(dt)) + " " + layout + " dim " + std::to_string(dim) +
                                   " index " + dtype_name(it);
          CAPTURE(what);
          Tensor idx = random_index({7}, x.size(d), it, ++seed);
          Tensor out = ops::index_select(x, dim, idx.to(Device::cuda()));
          CHECK(out.is_contiguous());
          test::check_cuda_equal(out, ops::index_select(xc, dim, idx), what);
          test::check_cuda_equal(ops::index_select(x, dim, stepped_on_device(idx)), ops::index_select(xc, dim, idx), what + " stepped index");
        }
      }
    }
  }
  // 0-dim index, an empty index, and a large one (many blocks, repeated rows).
  Tensor x = test::random({1000, 33}, DType::f32, 3);
  Tensor xg = x.to(Device::cuda());
  Tensor i0 = scalar_tensor(7, DType::i64);
  test::check_cuda_equal(ops::index_select(xg, 0, i0.to(Device::cuda())), ops::index_select(x, 0, i0), "0-dim index");
  Tensor none = zeros({0}, DType::i64);
  test::check_cuda_equal(ops::index_select(xg, 1, none.to(Device::cuda())), ops::index_select(x, 1, none), "empty index");
  Tensor big = random_index({100003}, 1000, DType::i64, 4);
  test::check_cuda_equal(ops::index_select(xg, 0, big.to(Device::cuda())), ops::index_select(x, 0, big), "100003 rows");
}

TEST_CASE("gather matches the CPU; index may be smaller off dim and larger along it") {
  test::require_cuda();
  uint64_t seed = 100;
  for (DType dt : kAnyTypes) {
    Tensor base = test::random({4, 5, 6}, dt, ++seed, -50, 50);
    for (const Tensor& x : {base.to(Device::cuda()), transposed_on_device(base, 0, 1)}) {
      Tensor xc = x.to(Device::cpu());
      for (int64_t dim : {0, 1, 2}) {
        Shape ishape{3, 4, 5};
        ishape[dim] = 8;
        Tensor idx = random_index(ishape, x.size(dim), DType::i64, ++seed);
        Tensor idx32 = random_index(ishape, x.size(dim), DType::i32, ++seed);
        const std::string what = std::string(dtype_name(dt)) + " dim " + std::to_string(dim);
        CAPTURE(what);
        test::check_cuda_equal(ops::gather(x, dim, idx.to(Device::cuda())), ops::gather(xc, dim, idx), what);
        test::check_cuda_equal(ops::gather(x, dim, transposed_on_device(idx32, 0, 2)), ops::gather(xc, dim, idx32), what + " strided i32 index");
      }
    }
  }
  // Large: one element per row picked along dim 1 (the cross-entropy pattern), and many per row.
  Tensor x = test::random({3000, 1001}, DType::f32, 5);
  Tensor xg = x.to(Device::cuda());
  for (Shape ishape : {Shape{3000, 1}, Shape{3000, 77}}) {
    Tensor idx = random_index(ishape, 1001, DType::i64, 6);
    test::check_cuda_equal(ops::gather(xg, 1, idx.to(Device::cuda())), ops::gather(x, 1, idx), "large gather");
  }
}

TEST_CASE("scatter_add on short or many fibers equals the CPU bitwise (in-order adds, rounded each step)") {
  test::require_cuda();
  uint64_t seed = 200;
  for (DType dt : kNumeric) {
    for (int64_t dim : {0, 1, 2}) {
      Shape sshape{4, 5, 3}, ishape{3, 4, 2}, srcshape{4, 5, 3};
      ishape[dim] = 9;  // more entries than the target has along dim: repeats
      srcshape[dim] = 10;
      Tensor self = test::random(sshape, dt, ++seed, -20, 20);
      Tensor src = test::random(srcshape, dt, ++seed, -20, 20);
      Tensor index = random_index(ishape, sshape[dim], DType::i64, ++seed);
      const std::string what = std::string(dtype_name(dt)) + " dim " + std::to_string(dim);
      CAPTURE(what);
      Tensor expected = ops::scatter_add(self, dim, index, src);

      Tensor gself = self.to(Device::cuda());
      Tensor out = ops::scatter_add(gself, dim, index.to(Device::cuda()), transposed_on_device(src, 0, 2));
      test::check_cuda_equal(out, expected, what + " scatter_add");
      test::check_cuda_equal(gself, self, what + " scatter_add leaves self alone");

      // In place on a transposed view: the writes land in the base tensor.
      Tensor base = self.transpose(0, 2).contiguous().to(Device::cuda());
      Tensor view = base.transpose(0, 2);
      ops::scatter_add_(view, dim, transposed_on_device(index, 1, 2), src.to(Device::cuda()));
      test::check_cuda_equal(view, expected, what + " scatter_add_ through strides");
    }
  }
  // Many short fibers (the max/cross-entropy backward pattern): (50000, 1) indices along dim 1.
  Tensor grad = test::random({50000, 37}, DType::f32, 7);
  Tensor target = random_index({50000, 1}, 37, DType::i64, 8);
  Tensor src = test::random({50000, 1}, DType::f32, 9);
  test::check_cuda_equal(ops::scatter_add(grad.to(Device::cuda()), 1, target.to(Device::cuda()), src.to(Device::cuda())),
        ops::scatter_add(grad, 1, target, src), "many fibers");
}

TEST_CASE("scatter_add on few long fibers (atomics) equals the CPU on exactly summable values") {
  test::require_cuda();
  // 2 fibers of 2000 along dim 1 into 20 slots: the atomic path. Values in {0, 1, 2} keep every
  // partial sum exact in each dtype, so any order of the adds gives the CPU's result.
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i64, DType::i32, DType::u8}) {
    CAPTURE(dt);
    Tensor self = test::random({2, 20}, DType::i64, 1, 0, 3).to(dt);
    Tensor src = test::random({2, 2000}, DType::i64, 2, 0, 3).to(dt);
    Tensor index = random_index({2, 2000}, 20, DType::i64, 3);
    test::check_cuda_equal(ops::scatter_add(self.to(Device::cuda()), 1, index.to(Device::cuda()), src.to(Device::cuda())),
          ops::scatter_add(self, 1, index, src), std::string(dtype_name(dt)) + " atomics");
  }
}

TEST_CASE("index_add_ equals the CPU bitwise, in place through strides, with repeated indices") {
  test::require_cuda();
  uint64_t seed = 300;
  for (DType dt : kNumeric) {
    for (int64_t dim : {0, 1, 2}) {
      Shape sshape{3, 6, 4};
      Shape srcshape = sshape;
      srcshape[dim] = 11;
      Tensor index = random_index({11}, sshape[dim], dim == 1 ? DType::i32 : DType::i64, ++seed);
      Tensor src = test::random(srcshape, dt, ++seed, -20, 20);
      Tensor base = test::random({4, 6, 3}, dt, ++seed, -20, 20);
      const std::string what = std::string(dtype_name(dt)) + " dim " + std::to_string(dim);
      CAPTURE(what);
      Tensor expected = base.transpose(0, 2).contiguous();
      ops::index_add_(expected, dim, index, src);

      Tensor gbase = base.to(Device::cuda());
      Tensor gself = gbase.transpose(0, 2);  // (3, 6, 4), strided
      ops::index_add_(gself, dim, stepped_on_device(index), transposed_on_device(src, 1, 2));
      test::check_cuda_equal(gself, expected, what);
      test::check_cuda_equal(gbase.transpose(0, 2), expected, what + " (base)");
    }
  }
  // Many repeats: 20000 rows into 50 (the index_select backward pattern).
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor self = test::random({50, 96}, dt, 1);
    Tensor src = test::random({20000, 96}, dt, 2);
    Tensor index = random_index({20000}, 50, DType::i64, 3);
    Tensor gself = self.to(Device::cuda());
    ops::index_add_(gself, 0, index.to(Device::cuda()), src.to(Device::cuda()));
    Tensor expected = self.clone();
    ops::index_add_(expected, 0, index, src);
    test::check_cuda_equal(gself, expected, std::string(dtype_name(dt)) + " 20000 rows");
  }
}

TEST_CASE("embedding looks up rows for ids of any shape and dtype") {
  test::require_cuda();
  uint64_t seed = 400;
  for (DType dt : kAnyTypes) {
    Tensor w = test::random({10, 8}, dt, ++seed, -50, 50);
    for (const Tensor& weight : {w.to(Device::cuda()), transposed_on_device(w, 0, 1)}) {
      for (DType it : {DType::i64, DType::i32}) {
        Tensor ids = random_index({3, 5}, 10, it, ++seed);
        const std::string what = std::string(dtype_name(dt)) + " ids " + dtype_name(it);
        CAPTURE(what);
        test::check_cuda_equal(ops::embedding(weight, ids.to(Device::cuda())), ops::embedding(w, ids), what);
        test::check_cuda_equal(ops::embedding(weight, transposed_on_device(ids, 0, 1)), ops::embedding(w, ids), what + " strided ids");
      }
    }
  }
  Tensor w = test::random({50257, 64}, DType::bf16, 1);
  Tensor ids = random_index({8, 1024}, 50257, DType::i64, 2);
  test::check_cuda_equal(ops::embedding(w.to(Device::cuda()), ids.to(Device::cuda())), ops::embedding(w, ids), "GPT-sized table");
  Tensor id0 = scalar_tensor(3, DType::i64);
  test::check_cuda_equal(ops::embedding(w.to(Device::cuda()), id0.to(Device::cuda())), ops::embedding(w, id0), "0-dim id");
}

TEST_CASE("embedding_backward with repeated ids equals the CPU and is bitwise stable across runs") {
  test::require_cuda();
  uint64_t seed = 500;
  for (DType dt : kNumeric) {
    const int64_t V = 7, C = 5;
    Tensor ids = random_index({4, 6}, V - 1, DType::i64, ++seed);  // id V-1 unused: its row is zero
    Tensor grad = test::random({4, 6, C}, dt, ++seed, -20, 20);
    const std::string what = dtype_name(dt);
    CAPTURE(what);
    Tensor out = ops::embedding_backward(transposed_on_device(grad, 0, 2), transposed_on_device(ids, 0, 1), V);
    // Same additions in the same (position) order as the CPU, so equal, not just close.
    test::check_cuda_equal(out, ops::embedding_backward(grad, ids, V), what);
  }
  // GPT-2 sized: 50257 ids, 8 x 1024 positions, a third of them one frequent id.
  const int64_t V = 50257, C = 96;
  Tensor ids = random_index({8, 1024}, V, DType::i64, 1);
  int64_t* p = ids.data<int64_t>();
  for (int64_t k = 0; k < ids.numel(); k += 3) p[k] = 50256;
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor grad = test::random({8, 1024, C}, dt, 2);
    Tensor gg = grad.to(Device::cuda()), gi = ids.to(Device::cuda());
    Tensor one = ops::embedding_backward(gg, gi, V);
    Tensor two = ops::embedding_backward(gg, gi, V);
    CHECK(test::values(one) == test::values(two));
    Tensor cpu = ops::embedding_backward(grad, ids, V);
    test::check_cuda_matches(one, cpu, test::cuda_rtol(dt), test::cuda_rtol(dt), std::string(dtype_name(dt)) + " GPT-sized");
    test::check_cuda_equal(one, cpu, std::string(dtype_name(dt)) + " GPT-sized, bitwise");
  }
  // No ids at all: a zero table.
  Tensor none = zeros({0}, DType::i64);
  test::check_cuda_equal(ops::embedding_backward(zeros({0, 4}).to(Device::cuda()), none.to(Device::cuda()), 6),
        zeros({6, 4}), "no ids");
}

TEST_CASE("out-of-range indices on the GPU give the CPU's message, and in-place ops write nothing") {
  test::require_cuda();
  for (cuda::CheckMode mode : {cuda::CheckMode::immediate, cuda::CheckMode::deferred}) {
    const bool late = mode == cuda::CheckMode::deferred;
    CAPTURE(late);
    cuda::set_check_mode(mode);
    // A lookup's fault: thrown by the op (immediate), or by the next check (deferred, marked late).
    auto reported = [&](const std::function<void()>& op) {
      op();
      if (late) cuda::check_deferred_faults(/*wait=*/true);
    };
    const char* when = late ? "reported late" : "";
    auto cuda_i64 = [](std::vector<int64_t> v, Shape shape) { return from_vector<int64_t>(v, shape).to(Device::cuda()); };
    Tensor x = test::random({5, 3}, DType::f32, 1).to(Device::cuda());
    CHECK_ERROR_CONTAINS(reported([&] { ops::index_select(x, 0, cuda_i64({0, 7}, {2})); }), "index_select", "index 7",
                         "position [1]", "[0, 5)", "dim 0", "[5, 3]", when);
    CHECK_ERROR_CONTAINS(reported([&] { ops::index_select(x, 1, from_vector<int32_t>({-1}, {1}).to(Device::cuda())); }),
                         "index_select", "index -1", "[0, 3)", when);
    // The first bad position wins, whatever the thread order.
    CHECK_ERROR_CONTAINS(reported([&] { ops::index_select(x, 0, cuda_i64({1, 9, 2, 8, 6}, {5})); }), "index 9",
                         "position [1]");
    Tensor gi = zeros({2, 3}, DType::i64);
    gi.select(0, 1).select(0, 2).fill_(9);
    gi.select(0, 1).select(0, 0).fill_(-3);
    CHECK_ERROR_CONTAINS(reported([&] { ops::gather(x, 0, gi.to(Device::cuda())); }), "gather", "index -3",
                         "position [1, 0]", "[0, 5)", when);
    // In-place accumulations write nothing when an index is bad, in both modes (their adding
    // kernels skip on the device); the short-fiber, the atomic and the sorted paths.
    Tensor self = zeros({5, 3}).to(Device::cuda());
    CHECK_ERROR_CONTAINS(reported([&] { ops::scatter_add_(self, 1, gi.to(Device::cuda()), x); }), "scatter_add_",
                         "index -3", "[0, 3)", when);
    CHECK(test::values(self) == std::vector<double>(15, 0.0));
    Tensor long_self = zeros({4, 1000}).to(Device::cuda());
    Tensor long_index = zeros({1, 1000}, DType::i64);
    long_index.select(1, 700).fill_(1000);  // fibers of 1000 along dim 1, only one: the atomic path
    CHECK_ERROR_CONTAINS(
        reported([&] { ops::scatter_add_(long_self, 1, long_index.to(Device::cuda()), ones({1, 1000}).to(Device::cuda())); }),
        "scatter_add_", "index 1000", "position [0, 700]", when);
    CHECK(test::values(long_self) == std::vector<double>(4000, 0.0));
    CHECK_ERROR_CONTAINS(
        reported([&] { ops::index_add_(self, 0, cuda_i64({2, 5}, {2}), zeros({2, 3}).to(Device::cuda())); }),
        "index_add_", "index 5", "position [1]", "[0, 5)", when);
    CHECK(test::values(self) == std::vector<double>(15, 0.0));
    Tensor w = zeros({10, 4}).to(Device::cuda());
    CHECK_ERROR_CONTAINS(reported([&] { ops::embedding(w, cuda_i64({1, 2, 10, 3}, {2, 2})); }), "embedding",
                         "index 10", "position [1, 0]", "[0, 10)", when);
    CHECK_ERROR_CONTAINS(
        reported([&] { ops::embedding_backward(zeros({2, 4}).to(Device::cuda()), cuda_i64({3, 12}, {2}), 10); }),
        "embedding_backward", "index 12", "position [1]", "[0, 10)", when);
    // Bad positions in a strided index are reported in logical order, with the logical value.
    Tensor strided = stepped_on_device(from_vector<int64_t>({0, 1, 11, 2}, {4}));
    CHECK_ERROR_CONTAINS(reported([&] { ops::embedding(w, strided); }), "index 11", "position [2]");
    CHECK(cuda::deferred_faults_pending() == 0);
  }
  cuda::set_check_mode(cuda::CheckMode::deferred);
}

TEST_CASE("deferred index checks: lookups and embedding_backward make no host sync; a blocking read reports") {
  test::require_cuda();
  cuda::set_check_mode(cuda::CheckMode::deferred);
  Tensor w = test::random({10, 4}, DType::f32, 3).to(Device::cuda());
  Tensor good = from_vector<int64_t>({1, 2, 9, 3}, {2, 2}).to(Device::cuda());
  Tensor bad = from_vector<int64_t>({1, 12, 9, 3}, {2, 2}).to(Device::cuda());
  Tensor grad = test::random({2, 2, 4}, DType::f32, 4).to(Device::cuda());
  const int64_t syncs = cuda::host_sync_count();
  Tensor e = ops::embedding(w, good);
  Tensor g = ops::embedding_backward(grad, good, 10);
  Tensor eb = ops::embedding(w, bad);  // a fault, queued
  CHECK(cuda::host_sync_count() == syncs);
  CHECK(cuda::deferred_faults_pending() >= 1);
  // The first blocking read from the device reports it, with the op's message; the bad row is zeros.
  CHECK_ERROR_CONTAINS(eb.to(Device::cpu()), "embedding", "index 12", "position [0, 1]", "reported late");
  CHECK(cuda::deferred_faults_pending() == 0);
  CHECK(test::values(eb.select(0, 0).select(0, 1)) == std::vector<double>(4, 0.0));
  test::check_cuda_equal(e, ops::embedding(w.to(Device::cpu()), good.to(Device::cpu())), "embedding");
  test::check_cuda_equal(g, ops::embedding_backward(grad.to(Device::cpu()), good.to(Device::cpu()), 10), "embedding_backward");
  cuda::check_deferred_faults(/*wait=*/true);  // nothing left
}

TEST_CASE("index ops check dtypes and devices on the GPU") {
  test::require_cuda();
  Tensor x = zeros({5, 3}).to(Device::cuda());
  CHECK_ERROR_CONTAINS(ops::index_select(x, 0, zeros({2}, DType::f32).to(Device::cuda())), "index_select", "f32");
  CHECK_ERROR_CONTAINS(ops::gather(x, 0, zeros({2, 3}, DType::f64).to(Device::cuda())), "gather", "f64");
  CHECK_ERROR_CONTAINS(ops::index_select(x, 0, zeros({2}, DType::i64)), "index_select", "one device");
  CHECK_ERROR_CONTAINS(ops::embedding(zeros({5, 3}), zeros({2}, DType::i64).to(Device::cuda())), "embedding",
                       "one device");
  CHECK_ERROR_CONTAINS(ops::scatter_add(zeros({3}, DType::b8).to(Device::cuda()), 0,
                                        zeros({1}, DType::i64).to(Device::cuda()), zeros({1}, DType::b8).to(Device::cuda())),
                       "scatter_add_", "bool");
}
