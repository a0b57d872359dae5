// add_model_flags / apply_overrides (see model_flags.h).
#include "model_flags.h"

namespace kiln::apps {

void add_model_flags(CLI::App& app, ModelFlags& f, const std::string& model_help) {
  std::string presets;
  for (const auto& n : models::gpt_config_names()) presets += (presets.empty() ? "" : ", ") + n;
  app.add_option("--model", f.model, model_help + ": " + presets)->capture_default_str();
  app.add_option("--n-layer", f.n_layer, "override the preset's layer count (0: keep)");
  app.add_option("--n-head", f.n_head, "override the preset's head count (0: keep)");
  app.add_option("--n-embd", f.n_embd, "override the preset's width (0: keep)");
}

models::GPTConfig apply_overrides(const ModelFlags& f, models::GPTConfig c) {
  if (f.n_layer > 0) c.n_layer = f.n_layer;
  if (f.n_head > 0) c.n_head = f.n_head;
  if (f.n_embd > 0) c.n_embd = f.n_embd;
  c.validate();
  return c;
}

void add_memory_flags(CLI::App& app, std::string& recompute, std::string& fused_head, const std::string& where) {
  app.add_option("--recompute", recompute, "activation checkpointing" + where + ": none (default); block (the flag "
                 "alone) keeps only each block's input and re-runs the block in backward (about 1/3 more compute, far "
                 "less activation memory; same results); attention or mlp re-run only that half")
      ->expected(0, 1)->default_str("block");  // the value the flag alone takes
  app.add_option("--fused-head", fused_head, "Kiln's chunked LM head + cross entropy (never the whole (B, T, V) "
                 "logits): auto (on the CPU; off on CUDA, where it was slower), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}))->capture_default_str();
}

models::GPTRecompute parse_recompute_flag(const std::string& value) {
  return value.empty() ? models::GPTRecompute::block : models::parse_gpt_recompute(value);
}

models::GPTFusedHead parse_fused_head(const std::string& value) {
  if (value == "on") return models::GPTFusedHead::on;
  if (value == "off") return models::GPTFusedHead::off;
  KILN_CHECK(value == "auto", "--fused-head: expected auto, on or off, got '", value, "'");
  return models::GPTFusedHead::automatic;
}

}  // namespace kiln::apps
