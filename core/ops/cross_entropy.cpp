// Fused softmax cross-entropy fronts: argument checks, then the kernels of the operands' backend
// (core/cpu/cross_entropy.cpp, core/cuda/kernels/cross_entropy.cu) through one dispatch line (Note
// [One dispatch line]); a CUDA forward's target check is reported through Note [Deferred device checks].
#include <kiln/core/ops/cross_entropy.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <kiln/core/cpu/cross_entropy.h>
#include <kiln/core/cuda/kernels/cross_entropy.h>
#include <kiln/core/cuda/runtime/deferred_check.h>
#include <kiln/core/ops/backend.h>

namespace kiln::ops {

namespace {

// Shapes and dtypes both ops share: logits (N, C), targets (N,).
void check_args(const char* op, const Tensor& logits, const Tensor& targets, double label_smoothing) {
  check_defined(logits, op, "logits");
  check_defined(targets, op, "targets");
  KILN_CHECK_VALUE(logits.dim() == 2 && logits.size(1) >= 1, op, ": logits must be (N, C) with C >= 1, got shape ",
                   logits.shape());
  KILN_CHECK_VALUE(is_floating(logits.dtype()), op, ": logits must be floating, got ", logits.dtype());
  KILN_CHECK_VALUE(targets.dtype() == DType::i64 || targets.dtype() == DType::i32, op,
                   ": targets must be i64 or i32 class indices, got ", targets.dtype());
  KILN_CHECK_VALUE(targets.dim() == 1 && targets.size(0) == logits.size(0), op, ": targets of shape ", targets.shape(),
                   " do not match logits of shape ", logits.shape(), " (expected [", logits.size(0), "])");
  KILN_CHECK_VALUE(label_smoothing >= 0.0 && label_smoothing <= 1.0, op, ": label_smoothing must be in [0, 1], got ",
                   label_smoothing);
}

}  // namespace

void throw_bad_target(int64_t value, int64_t row, int64_t classes, int64_t ignore_index, bool late) {
  KILN_FAIL_INDEX("cross_entropy: target ", value, " at row ", row, " is out of range for ", classes,
                  " classes (ignore_index ", ignore_index, ")",
                  late ? " (reported late: checked on the device and read at a later host sync, see Note [Deferred "
                         "device checks]; KILN_CUDA_CHECKS=immediate reports it from the op itself)"
                       : "");
  std::abort();  // not reached
}

void check_targets(const Tensor& targets, int64_t classes, int64_t ignore_index) {
  const std::vector<int64_t> t = targets.to_vector<int64_t>();
  for (size_t i = 0; i < t.size(); ++i)
    if (t[i] != ignore_index && (t[i] < 0 || t[i] >= classes)) throw_bad_target(t[i], int64_t(i), classes, ignore_index);
}

CrossEntropyResult cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                         double label_smoothing) {
  const char* op = "cross_entropy";
  check_args(op, logits, targets, label_smoothing);
  Tensor fault;  // CUDA: the target check's device record
  CrossEntropyResult r = dispatch_device(
      op, {&logits, &targets},
      [&] { return cuda::cross_entropy_forward(logits, targets, ignore_index, label_smoothing, fault); },
      [&] { return KILN_CPU_KERNEL(cross_entropy_forward)(logits, targets, ignore_index, label_smoothing); });
  if (fault.defined()) {
    const int64_t classes = logits.size(1);
    cuda::check_fault_record(fault, [classes, ignore_index](int64_t row, int64_t value, bool late) {
      throw_bad_target(value, row, classes, ignore_index, late);
    });
  }
  return r;
}

Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              int64_t ignore_index, double label_smoothing, double scale, const Tensor& count,
                              int64_t columns) {
  const char* op = "cross_entropy_backward";
  check_args(op, logits, targets, label_smoothing);
  check_defined(grad_loss, op, "grad_loss");
  check_defined(lse, op, "lse");
  const int64_t rows = logits.size(0);
  KILN_CHECK_VALUE(is_floating(grad_loss.dtype()) && (grad_loss.numel() == rows || grad_loss.numel() == 1), op,
                   ": grad_loss must be floating with ", rows, " elements or one, got ", grad_loss.dtype(), " of shape ",
                   grad_loss.shape());
  KILN_CHECK_VALUE(is_floating(lse.dtype()) && lse.numel() == rows, op, ": lse must be floating with ", rows,
                   " elements, got ", lse.dtype(), " of shape ", lse.shape());
  KILN_CHECK_VALUE(!count.defined() || (count.numel() == 1 && count.dtype() == DType::i64), op,
                   ": count must be the forward's one-element i64 count, got ",
                   count.defined() ? std::string(dtype_name(count.dtype())) : std::string(), count.defined() ? count.shape() : Shape{});
  KILN_CHECK_VALUE(columns == 0 || columns >= logits.size(1), op, ": columns must be 0 or at least the logits' ",
                   logits.size(1), ", got ", columns);
  const Tensor& count_or_logits = count.defined() ? count : logits;  // an operand when given
  return dispatch_device(
      op, {&logits, &targets, &lse, &grad_loss, &count_or_logits},
      [&] {
        return cuda::cross_entropy_backward(grad_loss, logits, targets, lse, ignore_index, label_smoothing, scale,
                                            count, columns);
      },
      [&] {
        return KILN_CPU_KERNEL(cross_entropy_backward)(grad_loss, logits, targets, lse, ignore_index, label_smoothing, scale,
                                           count, columns);
      });
}

}  // namespace kiln::ops
