// cuDNN's fused-attention graphs (core/cuda/kernels/attention_cudnn_graph.cuh) matched against
// engines WITHOUT a GPU: cuDNN >= 9.8 answers its heuristics from a DEVICEPROP description of an H200
// (tests/core/data/h200_deviceprop.json, dumped on one, sm_90 as the H100) when a libcuda.so.1 can be
// loaded; ctest puts
// the CUDA toolkit's stub on this test's library path only (tests/CMakeLists.txt). The right graphs
// must yield engines, broken ones none. Plans, numbers and timing need a GPU
// (tests/autograd/test_cuda_attention_cudnn.cpp). Registered by hand, in CUDA builds only.
#include "test_util.h"

#include <dlfcn.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include <kiln/core/cuda/kernels/attention_cudnn_graph.cuh>
#include <kiln/core/cuda/runtime/cudnn_runtime_libs.h>

using namespace kiln;
using namespace kiln::cuda;

namespace {

// Exits 77 (skipped) with one line when this machine cannot answer deviceless queries.
void require_deviceless_cudnn() {
  if (cudnnGetVersion() < 90800) {
    std::printf("SKIPPED: cuDNN %zu is older than 9.8: no deviceless heuristics\n", cudnnGetVersion());
    std::exit(77);
  }
  if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) {
    std::printf("SKIPPED: no libcuda.so.1 on the library path (%s); ctest points LD_LIBRARY_PATH at a link to the "
                "CUDA toolkit's stubs/libcuda.so for this test\n",
                dlerror());
    std::exit(77);
  }
}

#if CUDNN_VERSION >= 90800
// The H200's DEVICEPROP descriptor, made once.
cudnnBackendDescriptor_t h200() {
  static BackendDescriptor prop = [] {
    const char* root = std::getenv("KILN_SOURCE_DIR");
    REQUIRE_MESSAGE(root, "KILN_SOURCE_DIR is not set (ctest sets it)");
    const std::string path = std::string(root) + "/tests/core/data/h200_deviceprop.json";
    std::ifstream in(path);
    REQUIRE_MESSAGE(in.good(), "cannot read ", path);
    std::stringstream text;
    text << in.rdbuf();
    const std::string json = text.str();
    BackendDescriptor d(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
    d.set(CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, static_cast<int64_t>(json.size() + 1),
          json.c_str())
        .finalize();
    return d;
  }();
  return prop.get();
}
#endif

enum class Layout { bhtd, bthd, gpt_qkv };

const char* layout_name(Layout l) {
  return l == Layout::bhtd ? "(B,H,T,D)" : l == Layout::bthd ? "(B,T,H,D) view" : "GPT qkv split";
}

// A problem in Kiln's layouts: q, k, v (and dout) as `layout` says; o and the gradients as the
// kernels allocate them, (B, H, T, D) views of (B, T, H, D) storage.
SdpaGraphSpec spec(int64_t b, int64_t h, int64_t t, int64_t d, cudnnDataType_t io, bool causal, Layout layout) {
  SdpaGraphSpec s;
  s.b = b, s.h = h, s.t = t, s.d = d, s.io = io, s.causal = causal;
  const SdpaStrides out = sdpa_strides_bthd(b, h, t, d);
  SdpaStrides in = layout == Layout::bhtd ? sdpa_strides_bhtd(b, h, t, d) : out;
  if (layout == Layout::gpt_qkv) in = {t * 3 * h * d, d, 3 * h * d, 1};  // slices of (B, T, 3C)
  s.q = s.k = s.v = in;
  s.o = s.dq = s.dk = s.dv = out;
  s.dout = layout == Layout::bhtd ? sdpa_strides_bhtd(b, h, t, d) : out;
  return s;
}

std::string describe(const SdpaGraphSpec& s, Layout layout) {
  return std::string(s.io == CUDNN_DATA_HALF ? "f16" : "bf16") + " B" + std::to_string(s.b) + " H" +
         std::to_string(s.h) + " T" + std::to_string(s.t) + " D" + std::to_string(s.d) +
         (s.causal ? " causal " : " full ") + layout_name(layout);
}

// The heuristics' answer for one graph, printed as one line: "fwd bf16 B8 ...: engines 2 (256 B), 1 (0 B)".
std::vector<SdpaEngineConfig> engines(const char* pass, const SdpaGraph& g, const std::string& what) {
#if CUDNN_VERSION >= 90800
  std::vector<SdpaEngineConfig> configs = sdpa_engine_configs(g, h200());
#else
  std::vector<SdpaEngineConfig> configs;
#endif
  std::string line = std::string(pass) + " " + what + " (" + std::to_string(g.op_count) + " ops): ";
  if (configs.empty()) line += "no engine";
  for (size_t i = 0; i < configs.size(); ++i)
    line += (i ? ", " : "engines ") + std::to_string(configs[i].engine) + " (" +
            std::to_string(configs[i].workspace) + " B" + (configs[i].runtime_compiled ? ", runtime-compiled" : "") +
            (configs[i].nondeterministic ? ", nondeterministic" : "") + ")";
  std::printf("  %s\n", line.c_str());
  return configs;
}

}  // namespace

TEST_CASE("cuDNN SDPA: the forward and backward graphs have engines on an H200 (deviceless)") {
  require_deviceless_cudnn();
  for (cudnnDataType_t io : {CUDNN_DATA_BFLOAT16, CUDNN_DATA_HALF})
    for (int64_t d : {64, 128})
      for (int64_t t : {77, 2000, 2048})
        for (bool causal : {true, false})
          for (Layout layout : {Layout::bhtd, Layout::bthd}) {
            const SdpaGraphSpec s = spec(2, 3, t, d, io, causal, layout);
            const std::string what = describe(s, layout);
            CAPTURE(what);
            const SdpaGraph fwd = build_sdpa_forward_graph(s, nullptr);
            CHECK(fwd.op_count == (causal ? 14 : 10));
            std::vector<SdpaEngineConfig> f = engines("fwd", fwd, what);
            CHECK_FALSE(f.empty());
            const SdpaGraph bwd = build_sdpa_backward_graph(s, nullptr);
            CHECK(bwd.op_count == (causal ? 22 : 18));
            std::vector<SdpaEngineConfig> b = engines("bwd", bwd, what);
            CHECK_FALSE(b.empty());
            for (const SdpaEngineConfig& c : f) CHECK(c.workspace >= 0);
            for (const SdpaEngineConfig& c : b) CHECK(c.workspace >= 0);
          }
}

TEST_CASE("cuDNN SDPA: the GPT's shapes on the qkv split have engines (deviceless)") {
  require_deviceless_cudnn();
  struct Case {
    int64_t b, h, t, d;
  };
  // gpt-1.3b and gpt2-124m, as bench_cuda measures them.
  for (Case c : {Case{8, 16, 2048, 128}, Case{16, 12, 1024, 64}}) {
    const SdpaGraphSpec s = spec(c.b, c.h, c.t, c.d, CUDNN_DATA_BFLOAT16, true, Layout::gpt_qkv);
    const std::string what = describe(s, Layout::gpt_qkv);
    CAPTURE(what);
    CHECK_FALSE(engines("fwd", build_sdpa_forward_graph(s, nullptr), what).empty());
    CHECK_FALSE(engines("bwd", build_sdpa_backward_graph(s, nullptr), what).empty());
  }
}

// Note [cuDNN SDPA engine choice]: the candidates a sweep times are mode A's configs first, in
// their order, then what modes B and FALLBACK add, each engine + knob set once.
TEST_CASE("cuDNN SDPA: the engine candidates start with mode A's, without repeats (deviceless)") {
  require_deviceless_cudnn();
#if CUDNN_VERSION >= 90800
  for (int64_t d : {128, 64})
  for (bool backward : {false, true}) {
    const SdpaGraphSpec s = spec(d == 128 ? 8 : 16, d == 128 ? 16 : 12, d == 128 ? 2048 : 1024, d,
                                 CUDNN_DATA_BFLOAT16, true, Layout::gpt_qkv);
    const SdpaGraph g = backward ? build_sdpa_backward_graph(s, nullptr) : build_sdpa_forward_graph(s, nullptr);
    const std::vector<SdpaEngineConfig> a = sdpa_engine_configs(g, h200());
    const std::vector<SdpaEngineConfig> all = sdpa_engine_candidates(g, h200());
    std::printf("  %s D%d candidates:\n", backward ? "bwd" : "fwd", static_cast<int>(d));
    for (size_t i = 0; i < all.size(); ++i) std::printf("    #%zu %s\n", i, sdpa_engine_label(all[i]).c_str());
    REQUIRE_FALSE(a.empty());
    REQUIRE(all.size() >= 1);
    for (size_t i = 0; i < all.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        CHECK_FALSE((all[i].engine == all[j].engine && all[i].knobs == all[j].knobs));
    // Mode A's first config leads; every engine mode A offers is among the candidates.
    CHECK(all[0].engine == a[0].engine);
    CHECK(all[0].knobs == a[0].knobs);
    CHECK(std::string(all[0].mode) == "A");
    for (const SdpaEngineConfig& c : a)
      CHECK(std::any_of(all.begin(), all.end(), [&](const SdpaEngineConfig& o) { return o.engine == c.engine; }));
    CHECK(sdpa_engine_label(all[0]).rfind("engine " + std::to_string(all[0].engine) + " (mode A, ", 0) == 0);
    // The knob variants follow the heuristics' configs; without them the list is that prefix.
    const std::vector<SdpaEngineConfig> plain = sdpa_engine_candidates(g, h200(), /*with_knobs=*/false);
    REQUIRE(plain.size() <= all.size());
    for (size_t i = 0; i < all.size(); ++i) {
      const bool knob = std::string(all[i].mode) == "knob";
      CHECK(knob == (i >= plain.size()));
      if (i < plain.size()) CHECK(all[i].engine == plain[i].engine);
      if (knob) CHECK(all[i].knobs.size() == 1);
    }
  }
#endif
}

TEST_CASE("cuDNN SDPA: broken forward graphs have no engine (deviceless)") {
  require_deviceless_cudnn();
  for (int64_t d : {64, 128}) {
    SdpaGraphSpec s = spec(2, 3, 2048, d, CUDNN_DATA_BFLOAT16, true, Layout::bthd);
    CAPTURE(d);
    // The control: the same problem as built for the runtime.
    REQUIRE_FALSE(engines("fwd", build_sdpa_forward_graph(s, nullptr), describe(s, Layout::bthd)).empty());

    SdpaGraphSpec f32_probs = s;
    f32_probs.probs_in_f32 = true;
    CHECK(engines("fwd", build_sdpa_forward_graph(f32_probs, nullptr), describe(s, Layout::bthd) + ", P in f32")
              .empty());

    SdpaGraphSpec no_stats = s;
    no_stats.with_stats = false;
    const SdpaGraph g = build_sdpa_forward_graph(no_stats, nullptr);
    CHECK(g.op_count == 12);
    CHECK(engines("fwd", g, describe(s, Layout::bthd) + ", no stats output").empty());
  }
}

TEST_CASE("cuDNN SDPA: the run-time compiler and driver are found") {
  require_deviceless_cudnn();
  // Under the stub, libcuda.so.1 loads; libnvrtc comes from the library path or the toolkit.
  CHECK_MESSAGE(cudnn_runtime_compiler_problem().empty(), cudnn_runtime_compiler_problem());
}
