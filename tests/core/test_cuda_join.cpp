// cat/stack/split/chunk on the GPU against the CPU: they are views plus Tensor::copy_, so this checks
// the fronts accept CUDA tensors, keep results on the device, promote dtypes, handle strided parts,
// and refuse mixed devices. Skipped (exit 77) without a usable device.
#include "test_util.h"

using namespace kiln;

TEST_CASE("cat matches the CPU along every dim, with strided parts, in every dtype") {
  test::require_cuda();
  uint64_t seed = 1;
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i64, DType::i32, DType::b8}) {
    for (int64_t dim : {0, 1, 2, -1}) {
      const int64_t d = dim < 0 ? dim + 3 : dim;
      std::vector<Tensor> cpu, gpu;
      for (int64_t n : {2, 1, 3, 1000}) {
        Shape s{3, 4, 5};
        s[d] = n;
        Tensor t = test::random(s, dt, ++seed, -50, 50);
        cpu.push_back(t);
        if (n == 1) gpu.push_back(t.transpose(0, 2).contiguous().to(Device::cuda()).transpose(0, 2));
        else if (n == 3) gpu.push_back(test::to_cuda(t, /*strided=*/true));
        else gpu.push_back(t.to(Device::cuda()));
      }
      const std::string what = std::string(dtype_name(dt)) + " dim " + std::to_string(dim);
      CAPTURE(what);
      Tensor out = ops::cat(gpu, dim);
      CHECK(out.is_contiguous());
      test::check_cuda_equal(out, ops::cat(cpu, dim), what);
    }
  }
}

TEST_CASE("cat promotes dtypes and accepts empty parts on the GPU") {
  test::require_cuda();
  Tensor a = from_vector<int32_t>({1, 2}, {2});
  Tensor b = from_vector<float>({0.5f}, {1});
  Tensor c = zeros({0}, DType::i64);
  Tensor out = ops::cat({a.to(Device::cuda()), c.to(Device::cuda()), b.to(Device::cuda())}, 0);
  test::check_cuda_equal(out, ops::cat({a, c, b}, 0), "i32 + i64 + f32");
  CHECK(out.dtype() == DType::f32);
  Tensor h = test::random({3, 2}, DType::f16, 4), bf = test::random({3, 5}, DType::bf16, 5);
  test::check_cuda_equal(ops::cat({h.to(Device::cuda()), bf.to(Device::cuda())}, 1), ops::cat({h, bf}, 1), "f16 + bf16 -> f32");
}

TEST_CASE("stack inserts a new dim at any position on the GPU") {
  test::require_cuda();
  uint64_t seed = 50;
  for (DType dt : {DType::f32, DType::bf16, DType::i64}) {
    std::vector<Tensor> cpu = {test::random({3, 4}, dt, ++seed), test::random({4, 3}, dt, ++seed).t(),
                               test::random({3, 8}, dt, ++seed).slice(1, 0, 8, 2)};
    std::vector<Tensor> gpu = {cpu[0].to(Device::cuda()), test::random({4, 3}, dt, seed - 1).to(Device::cuda()).t(),
                               test::random({3, 8}, dt, seed).to(Device::cuda()).slice(1, 0, 8, 2)};
    for (int64_t dim : {0, 1, 2, -1, -3}) {
      CAPTURE(dim);
      test::check_cuda_equal(ops::stack(gpu, dim), ops::stack(cpu, dim), std::string(dtype_name(dt)) + " stack");
    }
  }
}

TEST_CASE("split and chunk of a CUDA tensor are device views that cover it") {
  test::require_cuda();
  Tensor xc = test::random({4, 10, 3}, DType::f32, 7).transpose(0, 2);  // (3, 10, 4), strided
  Tensor x = test::random({4, 10, 3}, DType::f32, 7).to(Device::cuda()).transpose(0, 2);
  auto check_pieces = [&](const std::vector<Tensor>& g, const std::vector<Tensor>& c) {
    REQUIRE(g.size() == c.size());
    for (size_t k = 0; k < g.size(); ++k) {
      CHECK(g[k].storage() == x.storage());  // a view, not a copy
      test::check_cuda_equal(g[k], c[k], "piece " + std::to_string(k));
    }
  };
  check_pieces(ops::split(x, 4, 1), ops::split(xc, 4, 1));
  check_pieces(ops::split(x, std::vector<int64_t>{1, 0, 6, 3}, 1), ops::split(xc, std::vector<int64_t>{1, 0, 6, 3}, 1));
  check_pieces(ops::chunk(x, 3, 1), ops::chunk(xc, 3, 1));
  check_pieces(ops::chunk(x, 4, 0), ops::chunk(xc, 4, 0));
  // cat of the pieces gives the input back.
  test::check_cuda_equal(ops::cat(ops::split(x, 3, 1), 1), xc.contiguous(), "cat(split(x))");
}

TEST_CASE("join ops refuse mixed devices and keep their shape errors on the GPU") {
  test::require_cuda();
  Tensor a = zeros({2, 3}).to(Device::cuda()), b = zeros({2, 4}).to(Device::cuda());
  CHECK_ERROR_CONTAINS(ops::cat({a, zeros({2, 3})}, 0), "cat", "one device", "tensor 1");
  CHECK_ERROR_CONTAINS(ops::stack({zeros({2, 3}), a}, 0), "stack", "one device", "tensor 1");
  CHECK_ERROR_CONTAINS(ops::cat({a, b, zeros({3, 4}).to(Device::cuda())}, 1), "cat", "tensor 2", "[3, 4]", "[2, 3]");
  CHECK_ERROR_CONTAINS(ops::split(a, 0, 1), "split", "0");
}
