// cat, stack (copies with dtype promotion) and split/chunk (views) against loop references on
// random, strided inputs; shape errors name the tensor index and both shapes.
#include "test_util.h"

using namespace kiln;
using kiln::test::at;
using kiln::test::for_each_index;
using kiln::test::Index;
using kiln::test::values;

TEST_CASE("cat matches a loop along every dim, with strided inputs") {
  uint64_t seed = 1;
  for (DType dt : test::kDataTypes) {
    for (int64_t dim : {0, 1, 2, -1}) {
      const int64_t d = dim < 0 ? dim + 3 : dim;
      std::vector<Tensor> parts;
      for (int64_t n : {2, 1, 3}) {
        Shape s{3, 4, 5};
        s[d] = n;
        Tensor t = test::random(s, dt, ++seed);
        if (n == 1) t = t.transpose(0, 2).contiguous().transpose(0, 2);  // strided
        if (n == 3) {  // every other element of a twice-as-long last dim
          Shape wide = s;
          wide[2] *= 2;
          t = test::random(wide, dt, ++seed).slice(2, 0, wide[2], 2);
        }
        parts.push_back(t);
      }
      Tensor out = ops::cat(parts, dim);
      Shape want{3, 4, 5};
      want[d] = 6;
      REQUIRE(out.shape() == want);
      CHECK(out.dtype() == dt);
      std::vector<double> expected;
      for_each_index(want, [&](const Index& p) {
        Index q = p;
        size_t k = 0;
        while (q[d] >= parts[k].size(d)) q[d] -= parts[k++].size(d);
        expected.push_back(at(parts[k], q));
      });
      CHECK(values(out) == expected);
    }
  }
}

TEST_CASE("cat promotes dtypes and accepts empty parts") {
  Tensor a = from_vector<int32_t>({1, 2}, {2});
  Tensor b = from_vector<float>({0.5f}, {1});
  Tensor c = zeros({0}, DType::i64);
  Tensor out = ops::cat({a, c, b}, 0);
  CHECK(out.dtype() == DType::f32);
  CHECK(values(out) == std::vector<double>{1, 2, 0.5});
  CHECK(ops::cat({from_vector<int32_t>({3}, {1}), from_vector<int64_t>({4}, {1})}, 0).dtype() == DType::i64);
}

TEST_CASE("stack inserts a new dim at any position") {
  uint64_t seed = 50;
  for (DType dt : {DType::f32, DType::bf16, DType::i64}) {
    std::vector<Tensor> parts = {test::random({3, 4}, dt, ++seed), test::random({4, 3}, dt, ++seed).t(),
                                 test::random({3, 8}, dt, ++seed).slice(1, 0, 8, 2)};
    for (int64_t dim : {0, 1, 2, -1, -3}) {
      const int64_t d = dim < 0 ? dim + 3 : dim;
      Tensor out = ops::stack(parts, dim);
      Shape want{3, 4};
      want.insert(want.begin() + d, 3);
      REQUIRE(out.shape() == want);
      std::vector<double> expected;
      for_each_index(want, [&](const Index& p) {
        Index q = p;
        q.erase(q.begin() + d);
        expected.push_back(at(parts[p[d]], q));
      });
      CHECK(values(out) == expected);
    }
  }
}

TEST_CASE("split and chunk return views that cover the input") {
  Tensor x = test::random({4, 10, 3}, DType::f32, 7).transpose(0, 2);  // (3, 10, 4), strided
  auto check_pieces = [&](const std::vector<Tensor>& pieces, const std::vector<int64_t>& sizes, int64_t dim) {
    REQUIRE(pieces.size() == sizes.size());
    int64_t start = 0;
    for (size_t k = 0; k < pieces.size(); ++k) {
      CHECK(pieces[k].storage() == x.storage());  // a view, not a copy
      CHECK(pieces[k].size(dim) == sizes[k]);
      for_each_index(pieces[k].shape(), [&](const Index& p) {
        Index q = p;
        q[dim] += start;
        REQUIRE(at(pieces[k], p) == at(x, q));
      });
      start += sizes[k];
    }
  };
  check_pieces(ops::split(x, 4, 1), {4, 4, 2}, 1);
  check_pieces(ops::split(x, 10, 1), {10}, 1);
  check_pieces(ops::split(x, 3, 2), {3, 1}, 2);
  check_pieces(ops::split(x, std::vector<int64_t>{1, 0, 6, 3}, 1), {1, 0, 6, 3}, 1);
  check_pieces(ops::split(x, std::vector<int64_t>{2, 2}, -1), {2, 2}, 2);
  check_pieces(ops::chunk(x, 3, 1), {4, 4, 2}, 1);
  check_pieces(ops::chunk(x, 5, 1), {2, 2, 2, 2, 2}, 1);
  check_pieces(ops::chunk(x, 4, 0), {1, 1, 1}, 0);  // fewer chunks than asked, like torch
  // Writing through a piece changes the input.
  auto pieces = ops::split(x, 5, 1);
  pieces[1].fill_(9);
  CHECK(at(x, {2, 7, 3}) == 9.0);
  CHECK(at(x, {2, 4, 3}) != 9.0);
}

TEST_CASE("join errors name the tensors and shapes") {
  Tensor a = zeros({2, 3}), b = zeros({2, 4}), c = zeros({3, 4});
  CHECK_ERROR_CONTAINS(ops::cat({a, b, c}, 1), "cat", "tensor 2", "[3, 4]", "[2, 3]");
  CHECK_ERROR_CONTAINS(ops::cat({a, zeros({2, 3, 1})}, 0), "cat", "tensor 1", "[2, 3, 1]", "[2, 3]");
  CHECK_ERROR_CONTAINS(ops::cat({}, 0), "cat", "non-empty");
  CHECK_ERROR_CONTAINS(ops::cat({a}, 2), "cat", "2");
  CHECK_ERROR_CONTAINS(ops::stack({a, b}, 0), "stack", "tensor 1", "[2, 4]", "[2, 3]");
  CHECK_ERROR_CONTAINS(ops::split(a, 0, 1), "split", "0");
  CHECK_ERROR_CONTAINS(ops::split(a, std::vector<int64_t>{1, 1}, 1), "split", "sum to 2", "size 3");
  CHECK_ERROR_CONTAINS(ops::chunk(a, 0, 1), "chunk", "0");
}
