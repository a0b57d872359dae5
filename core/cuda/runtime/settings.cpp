// The math switches of kiln/cuda.h (matmul TF32; cuDNN's benchmark, deterministic, allow_tf32) and
// the attention switch, compiled in both builds so code that sets them builds either way;
// kernels/matmul.cpp, conv.cpp, fused_attention.cpp and layer_norm.cu read them.
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>

#include <kiln/cuda.h>

namespace kiln::cuda {

namespace {
std::atomic<bool> g_matmul_allow_tf32{false};
std::atomic<bool> g_benchmark{false};
std::atomic<bool> g_deterministic{false};
std::atomic<bool> g_allow_tf32{true};
std::atomic<int> g_attention{-1};  // an AttentionBackend, -1 until KILN_ATTENTION is read or the setter runs
std::atomic<int> g_cross_entropy{-1};  // a CrossEntropyKernel, -1 until KILN_CROSS_ENTROPY_KERNEL is read or set
std::atomic<int> g_vector_cols{-1};  // 0/1, -1 until KILN_CUDA_REDUCE_COLS is read or set
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

CrossEntropyKernel parse_cross_entropy_kernel(const std::string& name) {
  if (name == "accurate") return CrossEntropyKernel::accurate;
  if (name == "fast") return CrossEntropyKernel::fast;
  if (name == "registers") return CrossEntropyKernel::registers;
  KILN_FAIL_VALUE("KILN_CROSS_ENTROPY_KERNEL must be accurate, fast or registers, got '", name, "'");
  return CrossEntropyKernel::accurate;
}

const char* cross_entropy_kernel_name(CrossEntropyKernel kernel) {
  switch (kernel) {
    case CrossEntropyKernel::accurate: return "accurate";
    case CrossEntropyKernel::fast: return "fast";
    case CrossEntropyKernel::registers: return "registers";
  }
  return "?";
}

CrossEntropyKernel cross_entropy_kernel() {
  int k = g_cross_entropy.load();
  if (k < 0) {
    const char* env = std::getenv("KILN_CROSS_ENTROPY_KERNEL");
    const CrossEntropyKernel fresh = env && *env ? parse_cross_entropy_kernel(env) : CrossEntropyKernel::registers;
    g_cross_entropy.compare_exchange_strong(k, static_cast<int>(fresh));  // a setter that ran meanwhile wins
    k = g_cross_entropy.load();
  }
  return static_cast<CrossEntropyKernel>(k);
}

void set_cross_entropy_kernel(CrossEntropyKernel kernel) { g_cross_entropy.store(static_cast<int>(kernel)); }

bool vector_column_reductions() {
  int v = g_vector_cols.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv("KILN_CUDA_REDUCE_COLS");
    const std::string name = env ? env : "";
    KILN_CHECK_VALUE(name.empty() || name == "scalar" || name == "vector",
                     "KILN_CUDA_REDUCE_COLS must be scalar or vector, got '", name, "'");
    g_vector_cols.compare_exchange_strong(v, name == "scalar" ? 0 : 1);  // a setter that ran meanwhile wins
    v = g_vector_cols.load();
  }
  return v == 1;
}

void set_vector_column_reductions(bool on) { g_vector_cols.store(on ? 1 : 0); }

std::string layer_norm_variant_name(const LayerNormVariant& v) {
  auto rows = [](LayerNormVariant::Rows r) {
    return r == LayerNormVariant::Rows::warp ? "warp" : r == LayerNormVariant::Rows::block ? "block" : "auto";
  };
  auto parts = [](LayerNormVariant::Partials p) {
    return p == LayerNormVariant::Partials::shared ? "shared" : p == LayerNormVariant::Partials::global ? "global" : "auto";
  };
  std::ostringstream os;
  os << "vec=" << v.vec_bytes << ",fwd=" << rows(v.fwd_rows) << ",bwd_blocks=" << v.bwd_blocks
     << ",partials=" << parts(v.bwd_partials) << ",bwd=" << (v.bwd == LayerNormVariant::Backward::split ? "split" : "fused");
  return os.str();
}

LayerNormVariant parse_layer_norm_variant(std::string_view text) {
  LayerNormVariant v;
  if (text.empty() || text == "default") return v;
  const std::string all(text);
  auto bad = [&](std::string_view why) {
    KILN_FAIL_VALUE("KILN_LAYER_NORM_VARIANT '", all, "': ", why, " (expected e.g. vec=16,fwd=auto,bwd_blocks=1024,",
                    "partials=auto; vec 16|8|0, fwd auto|warp|block, bwd_blocks 1..65535, partials auto|shared|global, ",
                    "bwd fused|split)");
  };
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) bad("'" + std::string(item) + "' is not key=value");
    const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "vec") {
      if (value == "16") v.vec_bytes = 16;
      else if (value == "8") v.vec_bytes = 8;
      else if (value == "0") v.vec_bytes = 0;
      else bad("vec must be 16, 8 or 0 (bytes per access; 0: one element)");
    } else if (key == "fwd") {
      if (value == "auto") v.fwd_rows = LayerNormVariant::Rows::automatic;
      else if (value == "warp") v.fwd_rows = LayerNormVariant::Rows::warp;
      else if (value == "block") v.fwd_rows = LayerNormVariant::Rows::block;
      else bad("fwd must be auto, warp or block");
    } else if (key == "bwd_blocks") {
      int64_t b = 0;
      for (char c : value) {
        if (c < '0' || c > '9' || b > 65535) bad("bwd_blocks must be a number in 1..65535");
        b = b * 10 + (c - '0');
      }
      if (value.empty() || b < 1 || b > 65535) bad("bwd_blocks must be a number in 1..65535");
      v.bwd_blocks = b;
    } else if (key == "partials") {
      if (value == "auto") v.bwd_partials = LayerNormVariant::Partials::automatic;
      else if (value == "shared") v.bwd_partials = LayerNormVariant::Partials::shared;
      else if (value == "global") v.bwd_partials = LayerNormVariant::Partials::global;
      else bad("partials must be auto, shared or global");
    } else if (key == "bwd") {
      if (value == "fused") v.bwd = LayerNormVariant::Backward::fused;
      else if (value == "split") v.bwd = LayerNormVariant::Backward::split;
      else bad("bwd must be fused or split");
    } else {
      bad("unknown key '" + std::string(key) + "'");
    }
  }
  return v;
}

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
