// The Trainer's whole-step CUDA graph state (Note [Whole-step CUDA graph], trainer_graph.cpp) and
// device_of; internal to parallel/trainer*.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include <kiln/core/cuda/runtime/deferred_check.h>
#include <kiln/core/cuda/runtime/graph.h>
#include <kiln/core/cuda/runtime/stream.h>
#include <kiln/parallel/trainer.h>

namespace kiln::dist {

// The device of the model's first parameter (the CPU for a model without parameters).
inline Device device_of(const nn::Module& model) {
  auto params = model.parameters();
  return params.empty() ? Device::cpu() : params.front().device();
}

struct Trainer::GraphState {
  cuda::Stream stream;       // the side stream the warm-up, the capture and the replays run on
  cuda::Graph graph;
  int eager_steps = 0;       // warm-up steps run since the last (re)start
  int64_t replays = 0;
  DeviceStep outputs;        // the captured step's outputs, rewritten by every replay
  std::vector<cuda::CapturedFault> faults;  // the captured ops' device checks, read on log steps
};

}  // namespace kiln::dist
