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
