// Hugging Face GPT-2 safetensors <-> Kiln GPT: Conv1D transposes, vocabulary padding, the tied
// head and the optional "transformer." prefix (see gpt_hf.h).
#include <kiln/models/gpt_hf.h>

#include <map>
#include <set>
#include <utility>
#include <vector>

#include <kiln/core/factory.h>
#include <kiln/core/io/safetensors.h>

namespace kiln::models {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// HF's Conv1D weights: (in, out) on disk, (out, in) in Kiln's Linear.
bool is_conv1d_weight(const std::string& name) {
  return ends_with(name, ".attn.c_attn.weight") || ends_with(name, ".attn.c_proj.weight") ||
         ends_with(name, ".mlp.c_fc.weight") || ends_with(name, ".mlp.c_proj.weight");
}

const std::string kPrefix = "transformer.";
const std::string kWte = "transformer.wte.weight";

// "h.0.attn.bias" (the causal mask, not c_attn's bias) and "h.0.attn.masked_bias".
bool is_hf_mask_buffer(const std::string& name) {
  return ends_with(name, ".attn.masked_bias") ||
         (ends_with(name, ".attn.bias") && !ends_with(name, ".c_attn.bias"));
}

}  // namespace

void save_gpt_hf(const GPT& model, const std::string& path) {
  const GPTConfig& cfg = model.config();
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, t] : model.state_dict()) {
    if (name == kWte) out.emplace_back(name, t.slice(0, 0, cfg.vocab_size));
    else if (is_conv1d_weight(name)) out.emplace_back(name, t.t());
    else out.emplace_back(name, t);
  }
  save_safetensors(path, out, {{"format", "pt"}});
}

void load_gpt_hf(GPT& model, const std::string& path) {
  SafetensorsFile file = load_safetensors(path);
  const GPTConfig& cfg = model.config();
  // The file's tensors under Kiln's names.
  std::map<std::string, Tensor> by_name;
  std::vector<std::string> unexpected;
  Tensor lm_head;
  for (auto& [raw_name, t] : file.tensors) {
    if (raw_name == "lm_head.weight") {
      lm_head = t;
      continue;
    }
    std::string name = raw_name.rfind(kPrefix, 0) == 0 ? raw_name : kPrefix + raw_name;
    if (is_hf_mask_buffer(name)) continue;
    by_name[name] = t;
  }

  std::map<std::string, Tensor> state;
  std::vector<std::string> missing, problems;
  std::set<std::string> used;
  for (auto& [name, param] : model.state_dict()) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      missing.push_back(name);
      continue;
    }
    used.insert(name);
    Tensor t = it->second;
    if (is_conv1d_weight(name) && t.dim() == 2) t = t.t().contiguous();
    if (name == kWte && t.dim() == 2 && t.size(1) == param.size(1) && t.size(0) < param.size(0)) {
      // Note [Padded vocabulary]: rows vocab_size .. padded_vocab_size - 1 are zeros.
      Tensor padded = zeros(param.shape(), TensorOptions(t.dtype()));
      padded.slice(0, 0, t.size(0)).copy_(t);
      t = padded;
    }
    if (name == kWte && t.dim() == 2 && t.size(0) < cfg.vocab_size)
      problems.push_back(detail::str_cat(path, ": ", name, " has ", t.size(0), " rows, fewer than vocab_size ",
                                         cfg.vocab_size));
    state[name] = t.to(param.dtype());
  }
  for (auto& [name, t] : by_name)
    if (!used.count(name)) unexpected.push_back(name);

  std::string report;
  auto list = [&](const char* what, const std::vector<std::string>& names) {
    if (names.empty()) return;
    report += detail::str_cat("\n  ", what, " (", names.size(), "):");
    for (const auto& n : names) report += " " + n;
  };
  list("missing", missing);
  list("unexpected", unexpected);
  for (const auto& p : problems) report += "\n  " + p;
  KILN_CHECK(report.empty(), "load_gpt_hf: ", path, " does not fit GPT(", model.extra_repr(), "):", report);

  if (lm_head.defined()) {
    // Tied head (Note [Tied LM head]): it must be wte itself, padded or not.
    const Tensor& wte = state.at(kWte);
    const int64_t rows = lm_head.dim() == 2 ? lm_head.size(0) : -1;
    bool same = lm_head.dim() == 2 && lm_head.size(1) == wte.size(1) && rows <= wte.size(0);
    if (same) {
      Tensor a = lm_head.to(DType::f64).contiguous(), b = wte.slice(0, 0, rows).to(DType::f64).contiguous();
      const double *pa = a.data<double>(), *pb = b.data<double>();
      for (int64_t i = 0; i < a.numel() && same; ++i) same = pa[i] == pb[i];
    }
    KILN_CHECK(same, "load_gpt_hf: ", path, ": lm_head.weight of shape ", lm_head.shape(),
               " is not equal to transformer.wte.weight; Kiln's GPT ties the head to the token embedding");
  }
  model.load_state_dict(state, /*strict=*/true);
}

}  // namespace kiln::models
