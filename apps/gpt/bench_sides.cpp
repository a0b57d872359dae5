// bench_gpt's configs and sides (see bench_sides.h).
#include "bench_sides.h"

#include <nlohmann/json.hpp>

#include <sstream>

#include <kiln/core/error.h>

#include "bench_util.h"

namespace kiln::apps {
namespace {

// The last line of `out` that parses as a JSON object (python may print warnings before it).
bool last_json(const std::string& out, nlohmann::json& j) {
  std::istringstream lines(out);
  std::string line;
  bool found = false;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '{') continue;
    try {
      j = nlohmann::json::parse(line);
      found = true;
    } catch (const std::exception&) {
    }
  }
  return found;
}

// "gpt-10m": 6 layers, 6 heads, 384 dims, context 256, byte vocabulary (10.8M parameters).
models::GPTConfig gpt_10m() {
  models::GPTConfig c = models::gpt_config("gpt-tiny");
  c.n_layer = 6;
  c.n_head = 6;
  c.n_embd = 384;
  c.block_size = 256;
  return c;
}

}  // namespace

BenchConfig named_config(const std::string& name) {
  if (name == "gpt-10m") return {name, gpt_10m(), 8, 256};
  models::GPTConfig c = models::gpt_config(name);  // fails listing the presets
  if (name == "gpt2-124m") return {name, c, 16, 1024};
  if (name == "gpt-1.3b") return {name, c, 8, 2048};  // issue #7: must fit 8 x 2048 on an 80 GB H100
  return {name, c, 8, c.block_size};
}

std::vector<BenchConfig> default_configs(bool cuda) {
  if (cuda) return {named_config("gpt2-124m"), named_config("gpt-1.3b")};
  return {named_config("gpt-tiny"), named_config("gpt-10m")};
}

std::string run_torch(const TorchSideOptions& a, const BenchConfig& bc, int64_t b, int64_t t, const std::string& mode,
                      int threads, Side& side) {
  const models::GPTConfig& c = bc.config;
  std::ostringstream cmd;
  cmd << bench::shell_quote(a.python) << ' ' << bench::shell_quote(a.script) << " --device " << a.device
      << " --dtype " << a.dtype << " --mode " << mode << " --attention " << a.attention << " --threads " << threads
      << " --batch " << b << " --seq " << t << " --warmup " << a.warmup << " --steps " << a.steps << " --n-layer "
      << c.n_layer << " --n-head " << c.n_head << " --n-embd " << c.n_embd << " --block " << c.block_size
      << " --vocab " << c.vocab_size << " --padded-vocab " << c.padded_vocab_size;
  if (a.recompute != "none") cmd << " --recompute " << a.recompute;
  int status = 0;
  const std::string out = bench::run_command(cmd.str(), &status);
  nlohmann::json j;
  if (!last_json(out, j)) {
    side.add_error("failed: no result (exit status " + std::to_string(status) + "; its stderr is above)");
    return "";
  }
  if (j.contains("error")) {
    side.add_error(j.value("oom", false) ? "out of memory" : "failed: " + j.value("error", std::string("?")));
    return "";
  }
  KILN_CHECK(j.value("params", int64_t(0)) == models::GPT::count_parameters(c), "the PyTorch model has ",
             j.value("params", int64_t(0)), " parameters, Kiln's ", models::GPT::count_parameters(c), " (",
             bc.name, ")");
  side.add(j.at("step_s").get<double>(), j.value("peak_bytes", int64_t(0)));
  const bool cpu_blas = j.value("blas", std::string("-")) != "-";
  return j.value("torch", std::string()) + " (" + j.value("attention", std::string("?")) + " attention" +
         (j.value("fused_adamw", false) ? ", fused AdamW" : "") + ")" +
         (cpu_blas ? "; " + bench::blas_description(j) : "");
}

void record_kiln(const StepTiming& r, Side& side) {
  if (!r.ok()) {
    side.add_error(r.oom ? "out of memory" : "failed: " + r.error);
    return;
  }
  side.add(r.seconds, r.peak_bytes);
  side.step_seconds = r.step_seconds;
}

}  // namespace kiln::apps
