// index_select, gather, scatter_add(_), index_add_, embedding(_backward): each against a loop
// reference built with test::at on random inputs, contiguous and strided, in several dtypes;
// plus bounds/dtype errors and thread-count invariance of embedding_backward.
#include <cstring>

#include "test_util.h"

using namespace kiln;
using kiln::test::at;
using kiln::test::for_each_index;
using kiln::test::Index;
using kiln::test::values;

namespace {

// Random indices in [0, n).
Tensor random_index(const Shape& shape, int64_t n, DType dt, uint64_t seed) {
  return test::random(shape, dt, seed, 0.0, double(n));
}

int64_t ravel(const Index& pos, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < pos.size(); ++d) flat = flat * shape[d] + pos[d];
  return flat;
}

// a + b rounded as the op's dtype rounds one accumulation step (exact for ints and f64).
double add_as(DType dt, double a, double b) {
  switch (dt) {
    case DType::f32: return double(float(a) + float(b));
    case DType::bf16: return double(float(BFloat16(float(a) + float(b))));
    default: return a + b;
  }
}

// A strided variant of x's values: the same logical tensor laid out transposed in memory.
Tensor transposed_copy(const Tensor& x, int64_t d0, int64_t d1) {
  return x.transpose(d0, d1).contiguous().transpose(d0, d1);
}

}  // namespace

TEST_CASE("index_select matches a loop, any dim, dtype and layout") {
  uint64_t seed = 10;
  for (DType dt : test::kDataTypes) {
    Tensor base = test::random({4, 5, 6}, dt, ++seed);
    Tensor wide = test::random({4, 10, 6}, dt, ++seed);
    for (const Tensor& x : {base, transposed_copy(base, 0, 2), wide.slice(1, 0, 10, 2)}) {
      REQUIRE(x.shape() == Shape{4, 5, 6});
      for (int64_t dim : {0, 1, 2, -1}) {
        int64_t d = dim < 0 ? dim + 3 : dim;
        for (DType it : {DType::i64, DType::i32}) {
          Tensor idx = random_index({7}, x.size(d), it, ++seed);
          Tensor out = ops::index_select(x, dim, idx);
          Shape want = x.shape();
          want[d] = 7;
          REQUIRE(out.shape() == want);
          CHECK(out.dtype() == dt);
          CHECK(out.is_contiguous());
          std::vector<double> expected;
          for_each_index(want, [&](const Index& p) {
            Index q = p;
            q[d] = int64_t(at(idx, {p[d]}));
            expected.push_back(at(x, q));
          });
          CHECK(values(out) == expected);
        }
      }
    }
  }
  // A strided index (every other entry).
  Tensor x = test::random({6, 3}, DType::f32, 3);
  Tensor idx = from_vector<int64_t>({5, 9, 0, 9, 2, 9}, {6}).slice(0, 0, 6, 2);
  CHECK(values(ops::index_select(x, 0, idx)) ==
        std::vector<double>{at(x, {5, 0}), at(x, {5, 1}), at(x, {5, 2}), at(x, {0, 0}), at(x, {0, 1}),
                            at(x, {0, 2}), at(x, {2, 0}), at(x, {2, 1}), at(x, {2, 2})});
}

TEST_CASE("gather matches a loop; index may be smaller than the input off dim") {
  uint64_t seed = 100;
  for (DType dt : test::kDataTypes) {
    Tensor base = test::random({4, 5, 6}, dt, ++seed);
    for (const Tensor& x : {base, transposed_copy(base, 0, 1)}) {
      for (int64_t dim : {0, 1, 2}) {
        Shape ishape{3, 4, 5};
        ishape[dim] = 8;  // larger than the input along dim is allowed
        Tensor idx = random_index(ishape, x.size(dim), DType::i64, ++seed);
        Tensor idx32 = transposed_copy(random_index(ishape, x.size(dim), DType::i32, ++seed), 0, 2);
        for (const Tensor& index : {idx, idx32}) {
          Tensor out = ops::gather(x, dim, index);
          REQUIRE(out.shape() == ishape);
          std::vector<double> expected;
          for_each_index(ishape, [&](const Index& p) {
            Index q = p;
            q[dim] = int64_t(at(index, p));
            expected.push_back(at(x, q));
          });
          CHECK(values(out) == expected);
        }
      }
    }
  }
}

TEST_CASE("scatter_add and scatter_add_ add repeated indices in order") {
  uint64_t seed = 200;
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::i64}) {
    for (int64_t dim : {0, 1, 2}) {
      Shape sshape{4, 5, 3}, ishape{3, 4, 2}, srcshape{4, 5, 3};
      ishape[dim] = 9;  // more entries than the target has along dim: repeats
      srcshape[dim] = 10;
      Tensor self = test::random(sshape, dt, ++seed);
      Tensor src_big = test::random({srcshape[0], srcshape[1], srcshape[2] * 2}, dt, ++seed);
      Tensor src = src_big.slice(2, 0, srcshape[2] * 2, 2);  // strided src
      Tensor index = random_index(ishape, sshape[dim], DType::i64, ++seed);

      std::vector<double> expected = values(self);
      for_each_index(ishape, [&](const Index& p) {
        Index q = p;
        q[dim] = int64_t(at(index, p));
        double& e = expected[ravel(q, sshape)];
        e = add_as(dt, e, at(src, p));
      });

      std::vector<double> before = values(self);
      Tensor out = ops::scatter_add(self, dim, index, src);
      CHECK(values(self) == before);  // out of place
      CHECK(values(out) == expected);

      // In place on a transposed view: the writes land in the base tensor.
      Tensor base = self.transpose(0, 2).contiguous();
      Tensor view = base.transpose(0, 2);
      ops::scatter_add_(view, dim, index, src);
      CHECK(values(view) == expected);
      CHECK(values(base) == values(out.transpose(0, 2)));
    }
  }
}

TEST_CASE("index_add_ matches a loop, in place through strides") {
  uint64_t seed = 300;
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::i64, DType::i32}) {
    for (int64_t dim : {0, 1, 2}) {
      Shape sshape{3, 6, 4};
      Tensor index = random_index({11}, sshape[dim], dim == 1 ? DType::i32 : DType::i64, ++seed);
      Shape srcshape = sshape;
      srcshape[dim] = 11;
      Tensor src = transposed_copy(test::random(srcshape, dt, ++seed), 1, 2);
      Tensor base = test::random({4, 6, 3}, dt, ++seed);
      Tensor self = base.transpose(0, 2);  // (3, 6, 4), strided

      std::vector<double> expected = values(self);
      for_each_index(srcshape, [&](const Index& p) {
        Index q = p;
        q[dim] = int64_t(at(index, {p[dim]}));
        double& e = expected[ravel(q, sshape)];
        e = add_as(dt, e, at(src, p));
      });
      ops::index_add_(self, dim, index, src);
      CHECK(values(self) == expected);
      CHECK(values(base.transpose(0, 2)) == expected);
    }
  }
}

TEST_CASE("embedding looks up rows for ids of any shape") {
  uint64_t seed = 400;
  for (DType dt : test::kDataTypes) {
    Tensor w = test::random({10, 8}, dt, ++seed);
    for (const Tensor& weight : {w, transposed_copy(w, 0, 1)}) {
      for (DType it : {DType::i64, DType::i32}) {
        Tensor ids = random_index({3, 5}, 10, it, ++seed);
        Tensor out = ops::embedding(weight, ids);
        REQUIRE(out.shape() == Shape{3, 5, 8});
        CHECK(out.dtype() == dt);
        std::vector<double> expected;
        for_each_index(out.shape(), [&](const Index& p) {
          expected.push_back(at(weight, {int64_t(at(ids, {p[0], p[1]})), p[2]}));
        });
        CHECK(values(out) == expected);
      }
    }
  }
  Tensor w = test::random({4, 2}, DType::f32, 1);
  CHECK(values(ops::embedding(w, scalar_tensor(3, DType::i64))) == std::vector<double>{at(w, {3, 0}), at(w, {3, 1})});
}

TEST_CASE("embedding_backward sums the rows of repeated ids") {
  uint64_t seed = 500;
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    const int64_t V = 7, C = 5;
    Tensor ids = transposed_copy(random_index({4, 6}, V - 1, DType::i64, ++seed), 0, 1);  // id V-1 unused
    Tensor grad = transposed_copy(test::random({4, 6, C}, dt, ++seed), 0, 2);
    // Reference: accumulate in position order, in float for f32/bf16, then round once.
    std::vector<double> acc(V * C, 0.0);
    for_each_index({4, 6}, [&](const Index& p) {
      int64_t v = int64_t(at(ids, p));
      for (int64_t c = 0; c < C; ++c) {
        double g = at(grad, {p[0], p[1], c});
        acc[v * C + c] = dt == DType::f64 ? acc[v * C + c] + g : double(float(acc[v * C + c]) + float(g));
      }
    });
    if (dt == DType::bf16)
      for (double& a : acc) a = float(BFloat16(float(a)));
    Tensor out = ops::embedding_backward(grad, ids, V);
    REQUIRE(out.shape() == Shape{V, C});
    CHECK(out.dtype() == dt);
    CHECK(values(out) == acc);
    for (int64_t c = 0; c < C; ++c) CHECK(at(out, {V - 1, c}) == 0.0);
  }
}

TEST_CASE("embedding_backward is bitwise the same for 1 and 2 threads") {
  const int64_t V = 1024, C = 128, N = 20000;  // ~20 repeats per id; enough rows for several chunks
  Tensor ids = random_index({N}, V, DType::i64, 77);
  Tensor grad = test::random({N, C}, DType::f32, 78);
  int saved = num_threads();
  set_num_threads(1);
  Tensor one = ops::embedding_backward(grad, ids, V);
  set_num_threads(2);
  Tensor two = ops::embedding_backward(grad, ids, V);
  set_num_threads(saved);
  CHECK(std::memcmp(one.data_ptr(), two.data_ptr(), one.nbytes()) == 0);
  // And both equal a sequential float sum for a few rows.
  for (int64_t v : {0, 511, 1023}) {
    std::vector<float> ref(C, 0.f);
    for (int64_t p = 0; p < N; ++p)
      if (int64_t(at(ids, {p})) == v)
        for (int64_t c = 0; c < C; ++c) ref[c] += float(at(grad, {p, c}));
    for (int64_t c = 0; c < C; ++c) REQUIRE(at(one, {v, c}) == double(ref[c]));
  }
}

TEST_CASE("out-of-range indices name the op, the value, its position and the range") {
  Tensor x = test::random({5, 3}, DType::f32, 1);
  CHECK_ERROR_CONTAINS(ops::index_select(x, 0, from_vector<int64_t>({0, 7}, {2})), "index_select", "index 7",
                       "position [1]", "[0, 5)");
  CHECK_ERROR_CONTAINS(ops::index_select(x, 1, from_vector<int32_t>({-1}, {1})), "index_select", "index -1",
                       "[0, 3)");
  Tensor gi = zeros({2, 3}, DType::i64);
  gi.select(0, 1).select(0, 2).fill_(9);
  CHECK_ERROR_CONTAINS(ops::gather(x, 0, gi), "gather", "index 9", "position [1, 2]", "[0, 5)");
  CHECK_ERROR_CONTAINS(ops::scatter_add(x, 1, gi, x), "scatter_add_", "index 9", "[0, 3)");
  Tensor self = zeros({5, 3});
  CHECK_ERROR_CONTAINS(ops::index_add_(self, 0, from_vector<int64_t>({5}, {1}), zeros({1, 3})), "index_add_",
                       "index 5", "[0, 5)");
  Tensor w = zeros({10, 4});
  CHECK_ERROR_CONTAINS(ops::embedding(w, from_vector<int64_t>({1, 2, 10, 3}, {2, 2})), "embedding", "index 10",
                       "position [1, 0]", "[0, 10)");
  CHECK_ERROR_CONTAINS(ops::embedding_backward(zeros({2, 4}), from_vector<int64_t>({3, 12}, {2}), 10),
                       "embedding_backward", "index 12", "[0, 10)");
}

TEST_CASE("bad index dtypes and shapes are reported") {
  Tensor x = zeros({5, 3});
  Tensor fidx = zeros({2}, DType::f32);
  CHECK_ERROR_CONTAINS(ops::index_select(x, 0, fidx), "index_select", "f32");
  CHECK_ERROR_CONTAINS(ops::gather(x, 0, zeros({2, 3}, DType::f64)), "gather", "f64");
  CHECK_ERROR_CONTAINS(ops::embedding(x, fidx), "embedding", "f32");
  CHECK_ERROR_CONTAINS(ops::gather(x, 0, zeros({2}, DType::i64)), "gather", "[2]", "[5, 3]");
  CHECK_ERROR_CONTAINS(ops::gather(x, 0, zeros({2, 4}, DType::i64)), "gather", "dim 1");
  CHECK_ERROR_CONTAINS(ops::scatter_add(x, 0, zeros({2, 3}, DType::i64), zeros({2, 3}, DType::f64)),
                       "scatter_add_", "f64", "f32");
  Tensor self = zeros({5, 3});
  CHECK_ERROR_CONTAINS(ops::index_add_(self, 0, zeros({2}, DType::i64), zeros({3, 3})), "index_add_", "[3, 3]",
                       "[2, 3]");
  Tensor bcast = zeros({3}).unsqueeze(0).expand({5, 3});
  CHECK_ERROR_CONTAINS(ops::index_add_(bcast, 1, zeros({3}, DType::i64), zeros({5, 3})), "index_add_", "broadcast");
  CHECK_ERROR_CONTAINS(ops::embedding(zeros({4}), zeros({2}, DType::i64)), "embedding", "2-D", "[4]");
  CHECK_ERROR_CONTAINS(ops::embedding_backward(zeros({3, 4}), zeros({2}, DType::i64), 5), "embedding_backward",
                       "[3, 4]", "[2]");
  CHECK_ERROR_CONTAINS(ops::scatter_add(zeros({3}, DType::b8), 0, zeros({1}, DType::i64), zeros({1}, DType::b8)),
                       "scatter_add_", "bool");
}
