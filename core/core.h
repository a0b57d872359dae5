// kiln/core: tensors, dtypes, devices, storage, RNG, and the raw (non-differentiable) ops.
#pragma once

#include <kiln/core/autocast.h>
#include <kiln/core/cpu_allocator.h>
#include <kiln/core/device.h>
#include <kiln/core/dtype.h>
#include <kiln/core/error.h>
#include <kiln/core/factory.h>
#include <kiln/core/generator.h>
#include <kiln/core/parallel.h>
#include <kiln/core/shape.h>
#include <kiln/core/tensor.h>
#include <kiln/core/cuda/runtime/allocator.h>
#include <kiln/core/cuda/runtime/deferred_check.h>
#include <kiln/core/cuda/kernels/gemm.h>
#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/cuda/runtime/stream.h>
#include <kiln/core/ops/ops.h>
#include <kiln/core/io/safetensors.h>
