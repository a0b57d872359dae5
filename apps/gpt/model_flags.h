// The model-shape flags train_gpt and sample_gpt share: --model (a preset) and the --n-layer,
// --n-head and --n-embd overrides.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include <kiln/models/gpt.h>

namespace kiln::apps {

struct ModelFlags {
  std::string model = "gpt-tiny";
  int64_t n_layer = 0, n_head = 0, n_embd = 0;  // 0: keep the config's
};

// Adds --model (with `model_help`, followed by the preset names) and the three overrides.
void add_model_flags(CLI::App& app, ModelFlags& flags, const std::string& model_help);

// `config` with the overrides applied, validated.
models::GPTConfig apply_overrides(const ModelFlags& flags, models::GPTConfig config);

// --recompute [MODE] (none by default, the flag alone is block) and --fused-head auto|on|off, into
// `recompute` and `fused_head`; `where` ends the --recompute help (e.g. " on both sides").
void add_memory_flags(CLI::App& app, std::string& recompute, std::string& fused_head, const std::string& where = "");

// --recompute [MODE]: "" (the flag alone) is block; else models::parse_gpt_recompute.
models::GPTRecompute parse_recompute_flag(const std::string& value);
// --fused-head auto|on|off.
models::GPTFusedHead parse_fused_head(const std::string& value);

}  // namespace kiln::apps
