// kiln/core for users: tensors, dtypes, devices, storage, RNG, autocast, safetensors. The raw
// kernels (kiln::ops, no autograd) and the CUDA launchers are internal: users call the
// differentiable ops of kiln/autograd, and kiln/cuda.h holds the CUDA settings.
#pragma once

#include <kiln/core/autocast.h>
#include <kiln/core/cpu_capability.h>
#include <kiln/core/cpu_allocator.h>
#include <kiln/core/device.h>
#include <kiln/core/dtype.h>
#include <kiln/core/error.h>
#include <kiln/core/factory.h>
#include <kiln/core/generator.h>
#include <kiln/core/memory_stats.h>
#include <kiln/core/parallel.h>
#include <kiln/core/profiler/profiler.h>
#include <kiln/core/profiler/summary.h>
#include <kiln/core/shape.h>
#include <kiln/core/tensor.h>
#include <kiln/core/io/safetensors.h>
#include <kiln/core/window.h>
