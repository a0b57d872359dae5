// Misuse of core ops fails with a kiln::Error that says what went wrong, never a crash: a tensor
// whose storage was released or shrunk (Storage::resize) or is pending is refused at the op's entry
// (Note [Reads within the storage]), quoting the storage's release note; and the errors that were
// already good (shape mismatch, out-of-range target or index, reshape to a wrong size) keep their text.
#include "test_util.h"

using namespace kiln;
using kiln::test::values;

namespace {

// A (2, 3) f32 tensor, and the same after its storage was released to 0 bytes.
Tensor filled(double v) { return full({2, 3}, v); }
Tensor released() {
  Tensor t = filled(1.0);
  t.storage()->resize(0);
  return t;
}

}  // namespace

TEST_CASE("an op refuses a tensor whose storage was released, naming the op, the argument and the shape") {
  const Tensor gone = released();
  const Tensor ok = filled(2.0);
  const char* released_text = "which holds 0 bytes (released): the storage was resized (Storage::resize)";
  CHECK_ERROR_CONTAINS(ops::add(ok, gone), "add: argument 1 of shape [2, 3] (f32, offset 0) reaches byte 24",
                       released_text);
  CHECK_ERROR_CONTAINS(ops::add(gone, 1.0), "add: argument 0 of shape [2, 3]", released_text);
  CHECK_ERROR_CONTAINS(ops::exp(gone), "exp: argument 0 of shape [2, 3]", released_text);
  CHECK_ERROR_CONTAINS(ops::matmul(ok, gone.t()), "matmul: argument 1 of shape [3, 2]", released_text);
  CHECK_ERROR_CONTAINS(ops::linear(ok, gone, Tensor()), "linear: argument 1 of shape [2, 3]", released_text);
  CHECK_ERROR_CONTAINS(ops::sum(gone), "sum: argument 0 of shape [2, 3]", released_text);
  CHECK_ERROR_CONTAINS(ops::softmax(gone, -1), "softmax: argument 0 of shape [2, 3]", released_text);
  CHECK_ERROR_CONTAINS(ops::index_select(gone, 0, from_vector<int64_t>({0}, {1})),
                       "index_select: argument 0 of shape [2, 3]", released_text);
  CHECK_ERROR_CONTAINS(ops::embedding(gone, from_vector<int64_t>({0}, {1})), "embedding: argument 0 of shape [2, 3]");
  CHECK_ERROR_CONTAINS(ops::layer_norm(ok, {3}, gone.select(0, 0), Tensor(), 1e-5), "layer_norm: argument 1 of shape [3]");
  // The copies (and so every cast, transfer, clone and print) and the fills, reading or writing.
  CHECK_ERROR_CONTAINS(gone.clone(), "copy_: source of shape [2, 3]", released_text);
  CHECK_ERROR_CONTAINS(gone.to(DType::f64), "copy_: source of shape [2, 3]");
  CHECK_ERROR_CONTAINS(Tensor(ok).copy_(gone), "copy_: source of shape [2, 3]");
  CHECK_ERROR_CONTAINS(Tensor(gone).copy_(ok), "copy_: destination of shape [2, 3]");
  CHECK_ERROR_CONTAINS(Tensor(gone).fill_(0.0), "fill_: tensor of shape [2, 3]");
  CHECK_ERROR_CONTAINS(gone.str(), "print: tensor of shape [2, 3]");
  // The host reads, also where no copy happens (an f32 CPU tensor read as f32, an f64 one as f64).
  CHECK_ERROR_CONTAINS(gone.to_vector<float>(), "to_vector: tensor of shape [2, 3]", released_text);
  Tensor one = full({1}, 1.0, TensorOptions(DType::f64));
  one.storage()->resize(0);
  CHECK_ERROR_CONTAINS(one.item(), "item: tensor of shape [1] (f64, offset 0) reaches byte 8", released_text);
  Generator g(1);
  Tensor target = gone;
  CHECK_ERROR_CONTAINS(uniform_(target, 0.0, 1.0, g), "uniform_: tensor of shape [2, 3]");
}

TEST_CASE("the check covers views by their furthest element, and refilled or empty tensors pass") {
  Tensor whole = zeros({16});
  Tensor head = whole.narrow(0, 0, 4), tail = whole.narrow(0, 12, 4);
  Tensor strided_out = whole.as_strided({2, 2}, {6, 1}, 1);  // elements 1, 2, 7, 8: bytes 4 .. 36
  Tensor strided_in = whole.as_strided({2, 2}, {5, 1}, 1);   // elements 1, 2, 6, 7: bytes 4 .. 32
  Tensor broadcast = whole.narrow(0, 0, 8).expand({3, 8});   // stride 0 reaches nothing further
  whole.storage()->resize(32);  // 8 floats remain
  CHECK_NOTHROW(ops::add(head, 1.0));
  CHECK_ERROR_CONTAINS(ops::add(tail, 1.0), "add: argument 0 of shape [4] (f32, offset 12) reaches byte 64 of its "
                       "storage, which holds 32 bytes:");
  CHECK_ERROR_CONTAINS(ops::add(strided_out, 1.0), "reaches byte 36 of its storage, which holds 32 bytes:");
  CHECK_NOTHROW(ops::add(strided_in, 1.0));
  CHECK_NOTHROW(ops::add(broadcast, 1.0));
  // No element, nothing read, even with no bytes at all.
  whole.storage()->resize(0);
  CHECK(ops::add(whole.narrow(0, 0, 0), 1.0).numel() == 0);
  // Refilled, every view reads again.
  whole.storage()->resize(64);
  whole.fill_(2.0);
  CHECK(values(ops::add(tail, 1.0)) == std::vector<double>{3, 3, 3, 3});
}

TEST_CASE("a pending storage is refused until its owner clears it, and its release note is quoted") {
  Tensor whole = zeros({8});
  Tensor part = whole.narrow(0, 4, 2);
  // Without a note: the pending write is the cause.
  whole.storage()->set_pending(true);
  CHECK_ERROR_CONTAINS(ops::mul(part, 2.0), "mul: argument 0 of shape [2] (f32, offset 4) lies in a storage whose "
                       "bytes are still being written (pending", "wait for the operation that writes it");
  // With one, the storage is released to its readers and the owner's note says why (issue #49: FSDP's
  // prefetched gather that no pre-hook waited for).
  size_t asked = 0;
  whole.storage()->set_release_note([&asked](size_t byte_offset) {
    asked = byte_offset;
    return std::string("it belongs to the test's owner: call refill()");
  });
  CHECK_ERROR_CONTAINS(ops::mul(part, 2.0), "mul: argument 0 of shape [2] (f32, offset 4) lies in a released storage: "
                       "it belongs to the test's owner: call refill()");
  CHECK(asked == 16);  // the view's first byte
  whole.storage()->set_pending(false);
  CHECK(values(ops::add(part, 1.0)) == std::vector<double>{1, 1});
  whole.storage()->resize(0);
  CHECK_ERROR_CONTAINS(ops::add(part, 1.0), "which holds 0 bytes (released): it belongs to the test's owner: call refill()");
}

TEST_CASE("misuse that was already reported well keeps its message") {
  // Shape mismatches.
  CHECK_ERROR_CONTAINS(ops::matmul(zeros({2, 3}), zeros({4, 5})),
                       "matmul: inner dimensions do not match: [2, 3] @ [4, 5] (3 vs 4)");
  CHECK_ERROR_CONTAINS(ops::add(zeros({2, 3}), zeros({4, 3})),
                       "add: shapes [2, 3] and [4, 3] cannot be broadcast together (dim 0: 2 vs 4)");
  // An out-of-range target.
  CHECK_ERROR_CONTAINS(ops::cross_entropy_forward(zeros({2, 5}), from_vector<int64_t>({1, 7}, {2}), -100, 0.0),
                       "cross_entropy: target 7 at row 1 is out of range for 5 classes");
  // Out-of-range indices.
  CHECK_ERROR_CONTAINS(ops::embedding(zeros({4, 3}), from_vector<int64_t>({0, 4}, {2})),
                       "embedding: index 4 at position [1] is out of range [0, 4) for dim 0 of the weight of shape [4, 3]");
  CHECK_ERROR_CONTAINS(ops::index_select(zeros({4, 3}), 1, from_vector<int64_t>({-1}, {1})),
                       "index_select: index -1 at position [0] is out of range [0, 3) for dim 1 of the input of shape [4, 3]");
  // Reshape to a wrong size.
  CHECK_ERROR_CONTAINS(zeros({2, 3}).reshape({4, 2}), "reshape: shape [4, 2] is invalid for input of shape [2, 3] (6 elements)");
  CHECK_ERROR_CONTAINS(zeros({2, 3}).view({-1, 4}), "view: shape [-1, 4] is invalid for input of shape [2, 3] (6 elements)");
}
