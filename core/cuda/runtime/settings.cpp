// The math switches of kiln/cuda.h (matmul TF32; cuDNN's benchmark, deterministic, allow_tf32) and
// the attention switch, compiled in both builds so code that sets them builds either way;
// kernels/matmul.cpp, conv.cpp, fused_attention.cpp and layer_norm.cu read them.
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>

#include <kiln/cuda.h>

namespace kiln::cuda {

namespace {
std::atomic<bool> g_matmul_allow_tf32{false};
std::atomic<bool> g_benchmark{false};
std::atomic<bool> g_deterministic{false};
std::atomic<bool> g_allow_tf32{true};
std::atomic<int> g_attention{-1};  // an AttentionBackend, -1 until KILN_ATTENTION is read or the setter runs
std::mutex g_layer_norm_mutex;
std::optional<LayerNormVariant> g_layer_norm;  // unset until KILN_LAYER_NORM_VARIANT is read or the setter runs
}  // namespace

bool allow_tf32() { return g_matmul_allow_tf32.load(std::memory_order_relaxed); }
void set_allow_tf32(bool allow) { g_matmul_allow_tf32.store(allow, std::memory_order_relaxed); }
bool cudnn_benchmark() { return g_benchmark.load(); }
void set_cudnn_benchmark(bool on) { g_benchmark.store(on); }
bool cudnn_deterministic() { return g_deterministic.load(); }
void set_cudnn_deterministic(bool on) { g_deterministic.store(on); }
bool cudnn_allow_tf32() { return g_allow_tf32.load(); }
void set_cudnn_allow_tf32(bool on) { g_allow_tf32.store(on); }

AttentionBackend parse_attention_backend(const std::string& name) {
  if (name == "auto") return AttentionBackend::automatic;
  if (name == "cudnn") return AttentionBackend::cudnn;
  if (name == "kiln") return AttentionBackend::kiln;
  KILN_FAIL_VALUE("KILN_ATTENTION must be auto, cudnn or kiln, got '", name, "'");
  return AttentionBackend::automatic;
}

const char* attention_backend_name(AttentionBackend backend) {
  switch (backend) {
    case AttentionBackend::automatic: return "auto";
    case AttentionBackend::cudnn: return "cudnn";
    case AttentionBackend::kiln: return "kiln";
  }
  return "?";
}

AttentionBackend attention_backend() {
  int b = g_attention.load();
  if (b < 0) {
    const char* env = std::getenv("KILN_ATTENTION");
    const AttentionBackend fresh = env && *env ? parse_attention_backend(env) : AttentionBackend::automatic;
    g_attention.compare_exchange_strong(b, static_cast<int>(fresh));  // a setter that ran meanwhile wins
    b = g_attention.load();
  }
  return static_cast<AttentionBackend>(b);
}

void set_attention_backend(AttentionBackend backend) { g_attention.store(static_cast<int>(backend)); }

LayerNormVariant layer_norm_variant() {
  std::lock_guard<std::mutex> lock(g_layer_norm_mutex);
  if (!g_layer_norm) {
    const char* env = std::getenv("KILN_LAYER_NORM_VARIANT");
    g_layer_norm = parse_layer_norm_variant(env ? env : "");  // throws (and stays unset) on a bad value
  }
  return *g_layer_norm;
}

void set_layer_norm_variant(const LayerNormVariant& variant) {
  std::lock_guard<std::mutex> lock(g_layer_norm_mutex);
  g_layer_norm = variant;
}

}  // namespace kiln::cuda
