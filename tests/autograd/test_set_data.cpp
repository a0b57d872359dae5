// Tensor::set_data (torch's `tensor.data = new_data`): the tensor keeps its identity and autograd
// state and takes the new storage, shape, strides and dtype; torch's checks and view behaviour.
#include "test_util.h"

using namespace kiln;
using kiln::test::values;

TEST_CASE("set_data swaps the data and keeps identity, requires_grad, hooks and the autograd meta") {
  Tensor p = from_vector(std::vector<float>{1, 2, 3}, {3});
  p.requires_grad_();
  Tensor alias = p;  // a handle taken before, as an optimizer or DDP holds it
  int tensor_hook_calls = 0, post_hook_calls = 0;
  autograd::register_hook(p, [&](const Tensor& g) {
    ++tensor_hook_calls;
    return g * 10.0;
  });
  autograd::register_post_accumulate_grad_hook(p, [&](const Tensor& leaf) {
    ++post_hook_calls;
    CHECK(leaf.is_same(alias));
  });
  const AutogradMeta* meta = p.impl()->autograd_meta();

  Tensor src = from_vector(std::vector<double>{4, 5, 6, 7}, {2, 2});
  p.set_data(src.t());  // non-contiguous: strides travel too
  CHECK(alias.dtype() == DType::f64);
  CHECK(alias.shape() == Shape{2, 2});
  CHECK(alias.strides() == Strides{1, 2});
  CHECK(values(alias) == std::vector<double>{4, 6, 5, 7});
  CHECK(alias.storage() == src.storage());  // no copy
  CHECK(p.impl()->autograd_meta() == meta);
  CHECK(p.requires_grad());
  CHECK(p.is_leaf());
  CHECK_FALSE(src.requires_grad());  // new_data's own state is not touched

  (p * 2.0).backward(ones({2, 2}, DType::f64));
  CHECK(tensor_hook_calls == 1);
  CHECK(post_hook_calls == 1);
  CHECK(p.grad().dtype() == DType::f64);
  CHECK(values(p.grad()) == std::vector<double>{20, 20, 20, 20});
}

TEST_CASE("set_data on a view re-points that view only, as in torch") {
  Tensor base = from_vector(std::vector<double>{1, 2, 3, 4}, {4});
  Tensor view = base.slice(0, 1, 3);
  Tensor other_view = base.slice(0, 0, 2);
  view.set_data(from_vector(std::vector<double>{8, 9, 10}, {3}));
  CHECK(values(view) == std::vector<double>{8, 9, 10});
  CHECK(values(base) == std::vector<double>{1, 2, 3, 4});
  CHECK(values(other_view) == std::vector<double>{1, 2});
  view.fill_(0.0);  // writes land in the new storage, not the base
  CHECK(values(base) == std::vector<double>{1, 2, 3, 4});
}

TEST_CASE("set_data keeps a non-leaf's history, and a tensor set to itself is unchanged") {
  Tensor x = from_vector(std::vector<double>{1, 2}, {2});
  x.requires_grad_();
  Tensor y = x * 3.0;
  y.set_data(from_vector(std::vector<double>{5, 6}, {2}));
  CHECK_FALSE(y.is_leaf());
  CHECK(values(y) == std::vector<double>{5, 6});
  y.backward(ones({2}, DType::f64));
  CHECK(values(x.grad()) == std::vector<double>{3, 3});
  x.set_data(x);
  CHECK(values(x) == std::vector<double>{1, 2});
}

TEST_CASE("set_data rejects what torch rejects, naming the values") {
  Tensor p = zeros({3});
  p.requires_grad_();
  Tensor ints = zeros({3}, DType::i64);
  CHECK_ERROR_CONTAINS(p.set_data(ints), "set_data", "requires grad", "floating", "i64");
  CHECK(p.dtype() == DType::f32);  // unchanged after the failure
  CHECK_ERROR_CONTAINS(p.set_data(Tensor()), "set_data", "new_data", "undefined");
  CHECK_ERROR_CONTAINS(Tensor().set_data(p), "set_data", "undefined");
  Tensor plain = zeros({3});
  plain.set_data(ints);  // no grad: any dtype
  CHECK(plain.dtype() == DType::i64);
}
