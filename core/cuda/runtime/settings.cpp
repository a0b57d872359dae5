// The math switches of kiln/cuda.h (matmul TF32; cuDNN's benchmark, deterministic, allow_tf32),
// compiled in both builds so code that sets them builds either way; kernels/matmul.cpp and conv.cpp read them.
#include <atomic>

#include <kiln/cuda.h>

namespace kiln::cuda {

namespace {
std::atomic<bool> g_matmul_allow_tf32{false};
std::atomic<bool> g_benchmark{false};
std::atomic<bool> g_deterministic{false};
std::atomic<bool> g_allow_tf32{true};
}  // namespace

bool allow_tf32() { return g_matmul_allow_tf32.load(std::memory_order_relaxed); }
void set_allow_tf32(bool allow) { g_matmul_allow_tf32.store(allow, std::memory_order_relaxed); }
bool cudnn_benchmark() { return g_benchmark.load(); }
void set_cudnn_benchmark(bool on) { g_benchmark.store(on); }
bool cudnn_deterministic() { return g_deterministic.load(); }
void set_cudnn_deterministic(bool on) { g_deterministic.store(on); }
bool cudnn_allow_tf32() { return g_allow_tf32.load(); }
void set_cudnn_allow_tf32(bool on) { g_allow_tf32.store(on); }

}  // namespace kiln::cuda
