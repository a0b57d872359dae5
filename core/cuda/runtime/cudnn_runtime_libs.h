// cuDNN compiles some engines at run time (its fused attention among them): it loads
// libnvrtc.so.<CUDA major> to compile them and the driver (libcuda.so.1) to load them, and without
// either it only says NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING. This finds them once per process,
// in the places a Kiln install or a pip-wheel environment puts them, and says where it looked.
// No CUDA headers here.
#pragma once

#include <string>

namespace kiln::cuda {

// "" when libnvrtc and libcuda.so.1 are loadable (libnvrtc is then loaded, so cuDNN finds it by its
// soname), else one sentence naming what is missing, the directories searched and the fix. The
// search runs once: the library path itself (LD_LIBRARY_PATH, the binary's RUNPATH, ldconfig),
// then next to libcudnn and in the pip wheels' layout beside it (nvidia/cuda_nvrtc/lib,
// nvidia/cu13/lib), then the CUDA toolkit Kiln was built with.
const std::string& cudnn_runtime_compiler_problem();

// The message for a cuDNN status of NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING: what cuDNN needs and
// the search above.
std::string cudnn_runtime_prerequisite_message();

}  // namespace kiln::cuda
