// The op graphs of cuDNN's fused flash attention (SDPA) in the backend API, forward and backward
// (Note [cuDNN SDPA graphs] in the .cpp), and the engine configs cuDNN's heuristics offer for a
// graph. Shared by attention_cudnn.cpp, which builds plans from them and runs them, and by the
// deviceless test (tests/core/test_cudnn_sdpa_graph.cpp). CUDA-only (includes <cudnn.h>).
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <kiln/core/cuda/runtime/cudnn_backend.cuh>

namespace kiln::cuda {

// Strides of a (B, H, T, D) tensor in elements, in that order; D's must be 1.
using SdpaStrides = std::array<int64_t, 4>;

// (B, H, T, D) stored in that order.
SdpaStrides sdpa_strides_bhtd(int64_t b, int64_t h, int64_t t, int64_t d);
// (B, H, T, D) views of (B, T, H, D) storage: Kiln's layout (the GPT's heads, flash outputs).
SdpaStrides sdpa_strides_bthd(int64_t b, int64_t h, int64_t t, int64_t d);

// One attention problem: q, k, v, o (B, H, T, D), T queries over T keys, scale passed at run time.
struct SdpaGraphSpec {
  int64_t b = 1, h = 1, t = 1, d = 64;
  cudnnDataType_t io = CUDNN_DATA_BFLOAT16;  // q, k, v, o and the gradients: bf16 or f16
  bool causal = true;
  SdpaStrides q{}, k{}, v{}, o{};        // both graphs
  SdpaStrides dout{}, dq{}, dk{}, dv{};  // the backward's
  // Deliberate breakage of the forward for tests; the runtime leaves both alone. P in f32 instead
  // of the inputs' type, or no stats output: cuDNN has no engine for either.
  bool probs_in_f32 = false;
  bool with_stats = true;
};

// The unique ids of the tensors a variant pack binds (every other tensor is virtual).
namespace sdpa_uid {
inline constexpr int64_t kQ = 1, kK = 2, kV = 3, kO = 4, kStats = 5, kScale = 6, kNegInf = 7;
inline constexpr int64_t kDout = 8, kDq = 9, kDk = 10, kDv = 11, kSoftmaxSum = 12, kDqAccum = 13, kOne = 14;
}  // namespace sdpa_uid

// A finalized op graph with every tensor and op descriptor it was made of, kept alive beside it.
struct SdpaGraph {
  std::vector<BackendDescriptor> parts;
  BackendDescriptor graph;
  int64_t op_count = 0;
};

// The forward graph: o and, unless spec.with_stats is false, stats (B, H, T, 1) f32 = the row
// log-sum-exp of the scaled, masked scores. Binds kQ, kK, kV, kO, kStats, kScale, kNegInf (causal).
// `handle` may be null (deviceless: the heuristics then need a DEVICEPROP descriptor).
SdpaGraph build_sdpa_forward_graph(const SdpaGraphSpec& spec, cudnnHandle_t handle);

// The backward graph: dq, dk, dv from q, k, v, o, dout and the forward's stats. Also binds
// kSoftmaxSum ((B, H, T, 1) f32 scratch), kDqAccum ((B, H, T, D) contiguous f32, zeroed before each
// run), kScale, kOne and kNegInf (causal).
SdpaGraph build_sdpa_backward_graph(const SdpaGraphSpec& spec, cudnnHandle_t handle);

// One engine config the heuristics offered, with what cuDNN says about it.
struct SdpaEngineConfig {
  BackendDescriptor config;
  int64_t engine = -1;     // cuDNN's global engine index
  int64_t workspace = 0;   // bytes the config needs
  bool runtime_compiled = false, nondeterministic = false;
  std::vector<std::pair<int64_t, int64_t>> knobs;  // (cudnnBackendKnobType_t, value) the config sets
  const char* mode = "A";                          // the heuristics mode that offered it, or "knob"
  std::vector<BackendDescriptor> parts;            // descriptors a hand-made config refers to
};

// "engine 7 (mode A, 128 MiB workspace, knobs 3=1 ...)": how sweeps and errors name a config.
std::string sdpa_engine_label(const SdpaEngineConfig& c);

// The engine configs cuDNN's heuristics offer for `graph` in `mode` (A by default), best first;
// cuDNN drops those it cannot run (a missing libnvrtc among the reasons). `device_prop`, a
// finalized DEVICEPROP descriptor or null, lets them answer without a device (cuDNN >= 9.8).
std::vector<SdpaEngineConfig> sdpa_engine_configs(const SdpaGraph& graph, cudnnBackendDescriptor_t device_prop,
                                                  cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A);

// Every config the heuristics offer in modes A, B and FALLBACK, in that order, each engine + knob
// set once (Note [cuDNN SDPA engine choice], attention_cudnn.cpp): the candidates a sweep times and
// KILN_CUDNN_SDPA_ENGINE indexes. `with_knobs` appends each of those engines with its KERNEL_CFG or
// STAGES knob set to every value it takes (mode "knob"; the indices before them stay the same).
std::vector<SdpaEngineConfig> sdpa_engine_candidates(const SdpaGraph& graph, cudnnBackendDescriptor_t device_prop,
                                                     bool with_knobs = true);

}  // namespace kiln::cuda
