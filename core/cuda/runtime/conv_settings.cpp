// The cuDNN settings of conv.h (torch.backends.cudnn's benchmark, deterministic, allow_tf32),
// compiled in both builds so code that sets them builds either way; core/cuda/kernels/conv.cpp reads them.
#include <kiln/core/cuda/kernels/conv.h>

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
