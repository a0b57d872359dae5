// DistributedDataParallel: bucket assignment (pure, no processes), then multi-process runs over
// Gloo (fork + a file store) comparing N ranks with one rank on N times the batch.
#include <kiln/parallel/bucket.h>
#include <kiln/parallel/ddp.h>

#include "test_util.h"

using namespace kiln;
using namespace kiln::dist;

namespace {

// f32 tensors of the given element counts.
std::vector<Tensor> f32_tensors(const std::vector<int64_t>& numels) {
  std::vector<Tensor> out;
  for (int64_t n : numels) out.push_back(empty({n}, DType::f32));
  return out;
}

std::vector<size_t> reversed(size_t n) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = n - 1 - i;
  return order;
}

using Groups = std::vector<std::vector<size_t>>;

}  // namespace

TEST_CASE("bucket assignment: reverse order, first-bucket cap, then the main cap") {
  // 10 tensors of 100 floats (400 bytes). First cap 800 bytes -> 2 tensors, then 1200 -> 3 each.
  auto t = f32_tensors(std::vector<int64_t>(10, 100));
  Groups g = compute_bucket_assignment(t, reversed(10), 800, 1200);
  CHECK(g == Groups{{9, 8}, {7, 6, 5}, {4, 3, 2}, {1, 0}});
}

TEST_CASE("bucket assignment: a tensor bigger than the cap gets its own bucket; caps are inclusive") {
  auto t = f32_tensors({10, 1000, 10, 10});  // 40, 4000, 40, 40 bytes
  Groups g = compute_bucket_assignment(t, {0, 1, 2, 3}, 40, 100);
  // 40 >= 40 closes the first bucket at once; 4000 closes its own; 40 + 40 < 100 stays open.
  CHECK(g == Groups{{0}, {1}, {2, 3}});
}

TEST_CASE("bucket assignment: dtypes never share a bucket, each has its own first-bucket cap") {
  std::vector<Tensor> t{empty({100}, DType::f32), empty({100}, DType::f64), empty({100}, DType::f32),
                        empty({100}, DType::f64), empty({100}, DType::f32)};
  // f32: 400 bytes each; f64: 800 bytes each. First cap 400: one tensor per first bucket; then 1600.
  Groups g = compute_bucket_assignment(t, reversed(5), 400, 1600);
  // Visit order 4(f32) 3(f64) 2(f32) 1(f64) 0(f32): f32 first bucket {4}; f64 first bucket {3};
  // then f32 {2, 0} (800 < 1600, left open) and f64 {1} (left open), ordered by first position.
  CHECK(g == Groups{{4}, {3}, {2, 0}, {1}});
  for (const auto& bucket : g)
    for (size_t i : bucket) CHECK(t[i].dtype() == t[bucket.front()].dtype());
}

TEST_CASE("bucket assignment: default caps put a small model in one bucket; bad orders are refused") {
  auto t = f32_tensors({64, 8, 8, 1});
  CHECK(compute_bucket_assignment(t, reversed(4), mib_to_bytes(1), mib_to_bytes(25)) == Groups{{3, 2, 1, 0}});
  CHECK(mib_to_bytes(25) == 25u * 1024 * 1024);
  CHECK_ERROR_CONTAINS(compute_bucket_assignment(t, {0, 1, 1, 3}, 100, 100), "tensor 1 appears twice");
  CHECK_ERROR_CONTAINS(compute_bucket_assignment(t, {0, 7}, 100, 100), "index 7");
}
