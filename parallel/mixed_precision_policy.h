// MixedPrecisionPolicy: the dtypes data parallelism keeps parameters in and reduces gradients in,
// as torch FSDP2's MixedPrecisionPolicy(param_dtype, reduce_dtype). The default is Kiln's behaviour
// today in every sharding mode: f32 parameters (autocast casts per op) and f32 gradient reductions.
// The memory planner (memory_plan.h) models both; issue #49 makes the 16-bit policy train.
#pragma once

#include <optional>

#include <kiln/core/arg.h>
#include <kiln/core/dtype.h>
#include <kiln/core/error.h>

namespace kiln::dist {

/// Note [Mixed-precision policy]
/// param_dtype is the dtype forward and backward see. f32 (the default): the parameters are the f32
/// master copy and autocast casts a GEMM's weight per op (the graph keeps that cast until backward).
/// bf16 or f16: each rank keeps the parameters in 16 bits (whole under none, ZeRO-1 and ZeRO-2; its
/// shard under FSDP, which gathers them in 16 bits), gradients are produced in 16 bits, and the f32
/// master weights and the optimizer's moments exist only for the rank's shard; after the step the
/// updated master shard is written back into the 16-bit parameters. reduce_dtype is what gradients
/// are all-reduced or reduce-scattered in (unset: param_dtype, torch's default); a rank's gradient
/// shard is kept in it. Per parameter and rank at world N with AdamW this is the ZeRO paper's rule
/// (K = 12): DDP 2 + 2 + 12, ZeRO-1 2 + 2 + 12/N, ZeRO-2 2 + 14/N, FSDP 16/N bytes.
struct MixedPrecisionPolicy {
  KILN_ARG(DType, param_dtype) = DType::f32;
  KILN_ARG(std::optional<DType>, reduce_dtype);

  DType effective_reduce_dtype() const { return reduce_dtype_.value_or(param_dtype_); }
  /// Parameters held in 16 bits (the policy of issue #49), rather than today's f32 master copy.
  bool keeps_16bit_parameters() const { return dtype_size(param_dtype_) == 2; }
  /// Fails (ValueError) on what no mode supports: a dtype other than f32, bf16 and f16, or a 16-bit
  /// reduce_dtype over f32 parameters (their f32 gradients are reduced in f32).
  void check() const {
    const DType reduce = effective_reduce_dtype();
    for (DType d : {param_dtype_, reduce})
      KILN_CHECK_VALUE(d == DType::f32 || d == DType::bf16 || d == DType::f16, "MixedPrecisionPolicy: param_dtype and "
                       "reduce_dtype must be f32, bf16 or f16, got ", d);
    KILN_CHECK_VALUE(keeps_16bit_parameters() || reduce == DType::f32, "MixedPrecisionPolicy: reduce_dtype ", reduce,
                     " with f32 parameters is not supported (their f32 gradients are reduced in f32); set "
                     "param_dtype to ", reduce, " too");
  }
};

}  // namespace kiln::dist
