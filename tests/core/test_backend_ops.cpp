// The backend op table (ggml's test-backend-ops): each row is one op of kiln::ops, run in f32, bf16,
// f16 and f64 on every available backend and compared with the same op computed on the CPU in f64
// from the same (rounded) inputs, within the dtype's tolerance. The runner is backend_ops_table.h.
//
// Adding an op is adding one row to rows() below; no new file, no new loop:
//   {"my_op(dim=1)", {x({4, 9}), positive({9}).strided()},
//    [](const Args& a) -> Outputs { return {ops::my_op(a[0], a[1], 1)}; }},
// Inputs: x() uniform in [-2, 2), positive(), small_int() (ties for comparisons), ids(shape, hi),
// mask(); layouts .transposed(), .strided(), .broadcast_to(shape); .i32() for index inputs. Return
// every output worth comparing (values, indices, saved statistics); a backward kernel is a row that
// runs the forward it needs first. Optional: a tolerance factor for long sums or chained ops, and
// the dtypes (default f32, bf16, f16, f64).
//
// On the CPU the low-precision paths meet the f64 path of the same kernels (the CPU's own f64
// correctness is tests/core/test_<op>.cpp's); on CUDA every dtype meets the CPU. Without a device
// the CUDA column is reported skipped, never passed.
#include <kiln/core/ops/batch_norm.h>
#include <kiln/cuda.h>

#include "backend_ops_table.h"

using namespace kiln;
using namespace kiln::test::table;

namespace {

constexpr DType kF32 = DType::f32, kF64 = DType::f64;

std::vector<Row> rows() {
  auto unary = [](std::string name, Input in, Tensor (*fn)(const Tensor&)) {
    return Row{std::move(name), {std::move(in)}, [fn](const Args& a) -> Outputs { return {fn(a[0])}; }};
  };
  auto binary = [](std::string name, Input a, Input b, Tensor (*fn)(const Tensor&, const Tensor&)) {
    return Row{std::move(name), {std::move(a), std::move(b)},
               [fn](const Args& t) -> Outputs { return {fn(t[0], t[1])}; }};
  };
  // layer_norm over the trailing `shape`, affine when weight and bias follow x: out, mean and rstd.
  auto layer_norm = [](std::string name, std::vector<Input> in, Shape shape) {
    return Row{std::move(name), std::move(in),
               [shape](const Args& a) -> Outputs {
                 auto r = ops::layer_norm(a[0], shape, a.size() > 1 ? a[1] : Tensor(), a.size() > 2 ? a[2] : Tensor());
                 return {r.out, r.mean, r.rstd};
               },
               2};
  };
  const Conv2dOptions conv_s2 = Conv2dOptions().stride(2).padding(1);
  const Conv2dOptions conv_g2 = Conv2dOptions().groups(2).dilation(2).padding({2, 1});
  return {
      // ---- elementwise, unary ----
      unary("neg", x({4, 33}).strided(), ops::neg),
      unary("abs", x({4, 33}), ops::abs),
      unary("exp", x({5, 7}).transposed(), ops::exp),
      unary("log", positive({4, 33}), ops::log),
      unary("sqrt", positive({4, 33}).strided(), ops::sqrt),
      unary("rsqrt", positive({6, 9}).transposed(), ops::rsqrt),
      unary("tanh", x({4, 33}), ops::tanh),
      unary("sin", x({4, 33}).strided(), ops::sin),
      unary("cos", x({5, 7}).transposed(), ops::cos),
      unary("sigmoid", x({4, 33}), ops::sigmoid),
      unary("relu", x({3, 5, 7}).transposed(), ops::relu),
      unary("gelu_tanh", x({4, 33}), ops::gelu_tanh),
      unary("gelu_erf", x({4, 33}).strided(), ops::gelu_erf),
      unary("square", x({4, 33}), ops::square),
      unary("contiguous (strided copy)", x({3, 4, 5}).transposed(), [](const Tensor& t) { return t.contiguous(); }),
      // ---- elementwise, binary (broadcasting by shape and by stride-0 views) ----
      binary("add", x({2, 3, 8}), x({3, 1}), ops::add),
      binary("add(transposed, strided)", x({6, 5}).transposed(), x({6, 5}).strided(), ops::add),
      binary("sub", x({4, 9}), x({9}).strided(), ops::sub),
      binary("mul(expanded)", x({3, 4, 5}), x({1, 5}).broadcast_to({3, 4, 5}), ops::mul),
      binary("div", x({4, 9}), positive({4, 9}).transposed(), ops::div),
      binary("pow", positive({4, 9}), x({4, 9}), ops::pow),
      binary("maximum", x({5, 6}), x({6}), ops::maximum),
      binary("minimum", x({5, 1}), x({6}), ops::minimum),
      {"scalar forms: add, rsub, mul, div, pow",
       {positive({4, 9})},
       [](const Args& a) -> Outputs {
         return {ops::add(a[0], 0.75), ops::rsub(a[0], 3.0), ops::mul(a[0], -1.5), ops::div(a[0], 3.0),
                 ops::pow(a[0], 2.5)};
       }},
      {"gelu_tanh_backward", {x({4, 17}), x({4, 17}).strided()},
       [](const Args& a) -> Outputs { return {ops::gelu_tanh_backward(a[0], a[1])}; }},
      {"gelu_erf_backward", {x({4, 17}), x({17})},
       [](const Args& a) -> Outputs { return {ops::gelu_erf_backward(a[0], a[1])}; }},
      // ---- comparisons and selection ----
      {"compare: eq, ne, lt, le, gt, ge (ties)", {small_int({4, 9}), small_int({9}).strided()},
       [](const Args& a) -> Outputs {
         return {ops::eq(a[0], a[1]), ops::ne(a[0], a[1]), ops::lt(a[0], a[1]),
                 ops::le(a[0], a[1]), ops::gt(a[0], a[1]), ops::ge(a[0], a[1])};
       }},
      {"compare with a scalar: lt, ge, eq", {small_int({5, 6}).transposed()},
       [](const Args& a) -> Outputs { return {ops::lt(a[0], 0.5), ops::ge(a[0], 1.0), ops::eq(a[0], -2.0)}; }},
      // Integers apart by 0 or >= 1, with atol 0.5 and rtol 0.1 |b| (|b| < 3): close exactly where equal.
      {"isclose (ties), broadcast", {small_int({4, 9}), small_int({9}).strided()},
       [](const Args& a) -> Outputs { return {isclose(a[0], a[1], 0.1, 0.5)}; }},
      {"where", {mask({4, 1}), x({4, 7}), x({7}).strided()},
       [](const Args& a) -> Outputs { return {ops::where(a[0], a[1], a[2])}; }},
      {"masked_fill", {x({3, 8}).transposed(), mask({8})},
       [](const Args& a) -> Outputs { return {ops::masked_fill(a[0], a[1], -1e4)}; }},
      // ---- reductions ----
      unary("sum", x({6, 5, 7}), [](const Tensor& t) { return ops::sum(t); }),
      {"sum(dim=1)", {x({6, 5, 7})}, [](const Args& a) -> Outputs { return {ops::sum(a[0], {1})}; }},
      {"sum(dims={0, 2}, keepdim)", {x({6, 5, 7}).transposed()},
       [](const Args& a) -> Outputs { return {ops::sum(a[0], {0, 2}, true)}; }},
      {"mean(dim=-1)", {x({6, 40}).strided()}, [](const Args& a) -> Outputs { return {ops::mean(a[0], {-1})}; }},
      {"var(dim=1)", {x({6, 9, 4})}, [](const Args& a) -> Outputs { return {ops::var(a[0], {1})}; }},
      {"std(dim=0, correction=0)", {x({12, 5}).transposed()},
       [](const Args& a) -> Outputs { return {ops::std(a[0], {0}, 0)}; }},
      {"var, std over every element (kiln::var(x), kiln::std(x))", {x({7, 9}).strided()},
       [](const Args& a) -> Outputs { return {kiln::var(a[0]), kiln::std(a[0])}; }},
      {"amax(dim=-1), amin(dims={0, 1})", {x({6, 5, 7})},
       [](const Args& a) -> Outputs { return {ops::amax(a[0], {-1}), ops::amin(a[0], {0, 1})}; }},
      {"max(dim=1), min(dim=0): values and indices", {small_int({6, 9}).transposed()},
       [](const Args& a) -> Outputs {
         auto mx = ops::max(a[0], 1), mn = ops::min(a[0], 0, true);
         return {mx.values, mx.indices, mn.values, mn.indices};
       }},
      {"sum(dim=-1), long rows", {x({3, 5000})}, [](const Args& a) -> Outputs { return {ops::sum(a[0], {-1})}; }, 2},
      {"argmax(dim=2), argmin(dim=0)", {x({4, 5, 6})},
       [](const Args& a) -> Outputs { return {ops::argmax(a[0], 2), ops::argmin(a[0], 0)}; }},
      // ---- softmax ----
      {"softmax(dim=-1)", {x({8, 37})}, [](const Args& a) -> Outputs { return {ops::softmax(a[0], -1)}; }},
      {"softmax(dim=-1), long rows", {x({3, 2000})}, [](const Args& a) -> Outputs { return {ops::softmax(a[0], -1)}; }},
      {"softmax(dim=0)", {x({9, 6}).transposed()}, [](const Args& a) -> Outputs { return {ops::softmax(a[0], 0)}; }},
      {"log_softmax(dim=-1)", {x({5, 50}).strided()},
       [](const Args& a) -> Outputs { return {ops::log_softmax(a[0], -1)}; }},
      {"log_softmax(dim=1)", {x({3, 7, 4})}, [](const Args& a) -> Outputs { return {ops::log_softmax(a[0], 1)}; }},
      {"softmax_backward(dim=-1)", {x({6, 19}), x({6, 19})},
       [](const Args& a) -> Outputs { return {ops::softmax_backward(a[0], ops::softmax(a[1], -1), -1)}; }, 2},
      {"log_softmax_backward(dim=1)", {x({3, 7, 4}), x({3, 7, 4}).transposed()},
       [](const Args& a) -> Outputs {
         return {ops::log_softmax_backward(a[0], ops::log_softmax(a[1], 1), 1)};
       }, 2},
      // ---- layer_norm ----
      layer_norm("layer_norm(weight, bias)", {x({6, 40}), x({40}), x({40})}, {40}),
      layer_norm("layer_norm(shape={3, 8}, no affine)", {x({2, 5, 3, 8}).strided()}, {3, 8}),
      layer_norm("layer_norm(weight, bias), long rows", {x({3, 1500}), x({1500}), x({1500})}, {1500}),
      {"layer_norm_backward", {x({6, 24}), x({6, 24}), x({24}), x({24})},
       [](const Args& a) -> Outputs {
         auto f = ops::layer_norm(a[1], {24}, a[2], a[3]);
         auto g = ops::layer_norm_backward(a[0], a[1], f.mean, f.rstd, a[2], {24});
         return {g.grad_x, g.grad_weight, g.grad_bias};
       }, 4},
      // ---- cross_entropy ----
      {"cross_entropy_forward", {x({7, 11}), ids({7}, 11)},
       [](const Args& a) -> Outputs {
         auto r = ops::cross_entropy_forward(a[0], a[1]);
         return {r.loss, r.lse, r.count};
       }},
      {"cross_entropy_forward(label_smoothing, ignore_index=3, i32 targets)",
       {x({9, 6}).transposed(), ids({9}, 6).i32()},
       [](const Args& a) -> Outputs {
         auto r = ops::cross_entropy_forward(a[0], a[1], 3, 0.1);
         return {r.loss, r.lse, r.count};
       }},
      {"cross_entropy_backward(mean)", {x({7, 11}), ids({7}, 11), x({1})},
       [](const Args& a) -> Outputs {
         auto f = ops::cross_entropy_forward(a[0], a[1], 1, 0.05);
         return {ops::cross_entropy_backward(a[2], a[0], a[1], f.lse, 1, 0.05, 1.0, f.count)};
       }, 2},
      // ---- matrix products ----
      binary("mm", x({5, 16}), x({16, 7}), ops::mm),
      binary("matmul(row-major, column-major)", x({5, 16}), x({16, 7}).transposed(), ops::matmul),
      binary("matmul(batch broadcast)", x({2, 1, 5, 8}), x({3, 8, 4}), ops::matmul),
      binary("matmul(matrix, vector)", x({5, 12}).transposed(), x({12}), ops::matmul),
      binary("matmul(vector, vector)", x({12}), x({12}).strided(), ops::matmul),
      binary("bmm", x({3, 5, 8}), x({3, 8, 6}).transposed(), ops::bmm),
      {"linear(bias)", {x({2, 5, 16}), x({7, 16}), x({7})},
       [](const Args& a) -> Outputs { return {ops::linear(a[0], a[1], a[2])}; }},
      {"linear_gelu", {x({6, 16}), x({8, 16}), x({8})},
       [](const Args& a) -> Outputs {
         auto r = ops::linear_gelu(a[0], a[1], a[2]);
         return {r.out, r.pre_gelu};
       }},
      // ---- conv2d and its backward ----
      {"conv2d(stride=2, padding=1, bias)", {x({2, 3, 9, 9}), x({4, 3, 3, 3}), x({4})},
       [=](const Args& a) -> Outputs { return {ops::conv2d(a[0], a[1], a[2], conv_s2)}; }, 2},
      {"conv2d(groups=2, dilation=2)", {x({2, 4, 8, 7}).transposed(), x({6, 2, 3, 2})},
       [=](const Args& a) -> Outputs { return {ops::conv2d(a[0], a[1], Tensor(), conv_g2)}; }, 2},
      {"conv2d_backward_input", {x({2, 4, 5, 5}), x({4, 3, 3, 3})},
       [=](const Args& a) -> Outputs { return {ops::conv2d_backward_input(a[0], a[1], {2, 3, 9, 9}, conv_s2)}; }, 2},
      {"conv2d_backward_weight", {x({2, 4, 5, 5}), x({2, 3, 9, 9})},
       [=](const Args& a) -> Outputs { return {ops::conv2d_backward_weight(a[0], a[1], {4, 3, 3, 3}, conv_s2)}; }, 4},
      {"conv2d_backward_bias", {x({2, 4, 5, 5}).transposed()},
       [](const Args& a) -> Outputs { return {ops::conv2d_backward_bias(a[0])}; }, 2},
      // ---- pooling ----
      {"max_pool2d(3, stride=2, padding=1)", {x({2, 3, 9, 8})},
       [](const Args& a) -> Outputs {
         auto r = ops::max_pool2d(a[0], 3, 2, 1);
         return {r.out, r.indices};
       }},
      {"max_pool2d_backward", {x({2, 3, 5, 4}), x({2, 3, 9, 8}).transposed()},
       [](const Args& a) -> Outputs {
         auto r = ops::max_pool2d(a[1], 3, 2, 1);
         return {ops::max_pool2d_backward(a[0], r.indices, {2, 3, 9, 8})};
       }},
      {"avg_pool2d(3, stride=2, padding=1)", {x({2, 3, 9, 8}).strided()},
       [](const Args& a) -> Outputs { return {ops::avg_pool2d(a[0], 3, 2, 1)}; }},
      {"avg_pool2d_backward", {x({2, 3, 5, 4})},
       [](const Args& a) -> Outputs { return {ops::avg_pool2d_backward(a[0], {2, 3, 9, 8}, 3, 2, 1)}; }},
      {"adaptive_avg_pool2d(3, 4)", {x({2, 3, 7, 9})},
       [](const Args& a) -> Outputs { return {ops::adaptive_avg_pool2d(a[0], {3, 4})}; }},
      {"adaptive_avg_pool2d_backward", {x({2, 3, 3, 4})},
       [](const Args& a) -> Outputs { return {ops::adaptive_avg_pool2d_backward(a[0], {2, 3, 7, 9})}; }},
      // ---- batch_norm ----
      {"batch_norm(training, running stats)", {x({4, 3, 5, 5}), x({3}), x({3}), x({3}), positive({3})},
       [](const Args& a) -> Outputs {
         Tensor running_mean = a[3].clone(), running_var = a[4].clone();
         auto r = ops::batch_norm(a[0], a[1], a[2], running_mean, running_var, true, 0.1);
         return {r.out, r.mean, r.invstd, running_mean, running_var};
       }, 2},
      {"batch_norm(eval)", {x({4, 3, 6}).transposed(), x({3}), x({3}), x({3}), positive({3})},
       [](const Args& a) -> Outputs {
         auto r = ops::batch_norm(a[0], a[1], a[2], a[3], a[4], false);
         return {r.out, r.mean, r.invstd};
       }},
      {"batch_norm_backward(training)", {x({4, 3, 5, 5}), x({4, 3, 5, 5}), x({3}), x({3})},
       [](const Args& a) -> Outputs {
         auto f = ops::batch_norm(a[1], a[2], a[3], Tensor(), Tensor(), true);
         auto g = ops::batch_norm_backward(a[0], a[1], a[2], f.mean, f.invstd, true, {true, true, true});
         return {g.input, g.weight, g.bias};
       }, 4},
      // ---- index ops ----
      {"index_select(dim=0)", {x({10, 6}), ids({7}, 10)},
       [](const Args& a) -> Outputs { return {ops::index_select(a[0], 0, a[1])}; }},
      {"index_select(dim=1, i32 index)", {x({5, 8}).transposed(), ids({11}, 8).i32()},
       [](const Args& a) -> Outputs { return {ops::index_select(a[0], 1, a[1])}; }},
      {"gather(dim=1)", {x({4, 9, 3}), ids({4, 6, 2}, 9)},
       [](const Args& a) -> Outputs { return {ops::gather(a[0], 1, a[1])}; }},
      {"scatter_add(dim=0, repeated indices)", {x({5, 4}), ids({8, 4}, 5), x({8, 4}).transposed()},
       [](const Args& a) -> Outputs { return {ops::scatter_add(a[0], 0, a[1], a[2])}; }},
      {"index_add_(dim=1)", {x({4, 6}), ids({9}, 6), x({4, 9})},
       [](const Args& a) -> Outputs {
         Tensor self = a[0].clone();
         ops::index_add_(self, 1, a[1], a[2]);
         return {self};
       }},
      {"embedding", {x({12, 8}), ids({3, 5}, 12)},
       [](const Args& a) -> Outputs { return {ops::embedding(a[0], a[1])}; }},
      {"embedding_backward(repeated ids)", {x({3, 5, 8}), ids({3, 5}, 6)},
       [](const Args& a) -> Outputs { return {ops::embedding_backward(a[0], a[1], 6)}; }, 2},
      // ---- join and triangles ----
      {"cat(dim=1)", {x({3, 2, 4}), x({3, 5, 4}).strided(), x({3, 1, 4}).transposed()},
       [](const Args& a) -> Outputs { return {ops::cat({a[0], a[1], a[2]}, 1)}; }},
      {"stack(dim=0), stack(dim=-1)", {x({4, 5}), x({4, 5}).transposed()},
       [](const Args& a) -> Outputs { return {ops::stack({a[0], a[1]}, 0), ops::stack({a[0], a[1]}, -1)}; }},
      {"triu(diagonal=1)", {x({2, 5, 6})}, [](const Args& a) -> Outputs { return {ops::triu(a[0], 1)}; }},
      {"tril(diagonal=-1)", {x({3, 6, 5}).transposed()}, [](const Args& a) -> Outputs { return {ops::tril(a[0], -1)}; }},
  };
}

const std::vector<Row>& table() {
  static const std::vector<Row> t = rows();
  return t;
}

// The CPU column, run once; the test cases below share it.
const Report& cpu_report() {
  static const Report r = run_table(table(), Backend{"cpu", Device::cpu()});
  return r;
}

int64_t case_count() {
  int64_t n = 0;
  for (const Row& row : table()) n += int64_t(row.dtypes.size());
  return n;
}

}  // namespace

TEST_CASE("backend op table, CPU column: every row and dtype matches the CPU f64 reference") {
  const Report& r = cpu_report();
  CHECK_MESSAGE(r.failed == 0, r.failed, " of ", r.cases, " CPU cases failed");
  MESSAGE("cpu: ", table().size(), " rows, ", r.cases, " cases, ", r.failed, " failed");
}

TEST_CASE("backend op table: at least 30 rows, each run on the CPU in each of its dtypes") {
  const Report& r = cpu_report();
  CHECK(table().size() >= 30);
  REQUIRE(r.cases_per_row.size() == table().size());
  for (size_t i = 0; i < table().size(); ++i) {
    CHECK_MESSAGE(!table()[i].dtypes.empty(), table()[i].name, " has no dtypes");
    CHECK_MESSAGE(r.cases_per_row[i] == int64_t(table()[i].dtypes.size()), table()[i].name, " ran ",
                  r.cases_per_row[i], " cases");
  }
  CHECK(r.cases == case_count());
  if (!cuda::is_available())
    MESSAGE("cuda column skipped: ", case_count(), " cases not run (", cuda::build_info(),
            std::string(cuda::kBuilt ? ", no usable device" : ""), ")");
}

// Reported by doctest as skipped (not passed) without a device. TF32 is switched off so that f32
// is held to the f32 tolerance (TF32 has its own cases in test_cuda_matmul/test_cuda_conv).
TEST_CASE("backend op table, CUDA column: every row and dtype matches the CPU f64 reference" *
          doctest::skip(!cuda::is_available())) {
  const bool matmul_tf32 = cuda::allow_tf32(), conv_tf32 = cuda::cudnn_allow_tf32();
  cuda::set_allow_tf32(false);
  cuda::set_cudnn_allow_tf32(false);
  Report r = run_table(table(), Backend{"cuda", Device::cuda()});
  cuda::set_allow_tf32(matmul_tf32);
  cuda::set_cudnn_allow_tf32(conv_tf32);
  CHECK_MESSAGE(r.failed == 0, r.failed, " of ", r.cases, " CUDA cases failed");
  CHECK(r.cases == case_count());
  MESSAGE("cuda: ", table().size(), " rows, ", r.cases, " cases, ", r.failed, " failed");
}
