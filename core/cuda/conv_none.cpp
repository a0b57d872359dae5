// The cuDNN settings of conv.h in a build without CUDA: kept and read back, so code that sets them
// builds either way; nothing reads them (there are no CUDA kernels).
#include <kiln/core/cuda/conv.h>

#include <atomic>

namespace kiln::cuda {

namespace {
std::atomic<bool> g_benchmark{false};
std::atomic<bool> g_deterministic{false};
std::atomic<bool> g_allow_tf32{true};
}  // namespace

bool cudnn_benchmark() { return g_benchmark.load(); }
void set_cudnn_benchmark(bool on) { g_benchmark.store(on); }
bool cudnn_deterministic() { return g_deterministic.load(); }
void set_cudnn_deterministic(bool on) { g_deterministic.store(on); }
bool cudnn_allow_tf32() { return g_allow_tf32.load(); }
void set_cudnn_allow_tf32(bool on) { g_allow_tf32.store(on); }

}  // namespace kiln::cuda
