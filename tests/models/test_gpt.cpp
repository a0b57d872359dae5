// GPT: presets and parameter counts (closed form vs allocated vs HF/nanoGPT's published numbers),
// shapes and names, the tied head, causal masking, padded vocabulary, HF GPT-2 file interop,
// seeded determinism and a short training run that must drive the loss down.
#include "test_util.h"

#include <cmath>
#include <filesystem>

using namespace kiln;
using models::GPT;
using models::GPTConfig;

namespace {

// Small, with a vocabulary that is not a multiple of the padding (vocab 100 -> 128 rows).
GPTConfig small_config() {
  return {.vocab_size = 100, .padded_vocab_size = 128, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 16};
}

Tensor tokens(const Shape& shape, int64_t vocab, uint64_t seed) {
  return test::random(shape, DType::f64, seed, 0.0, double(vocab)).to(DType::i64);
}

// Closed form written out tensor by tensor (independent of GPT::count_parameters' grouping).
int64_t expected_count(const GPTConfig& g) {
  const int64_t c = g.n_embd, b = g.bias ? 1 : 0;
  int64_t block = (c + b * c) * 2                 // ln_1, ln_2
                  + (c * 3 * c + b * 3 * c)       // attn.c_attn
                  + (c * c + b * c)               // attn.c_proj
                  + (c * 4 * c + b * 4 * c)       // mlp.c_fc
                  + (4 * c * c + b * c);          // mlp.c_proj
  return g.padded_vocab_size * c + g.block_size * c + g.n_layer * block + (c + b * c);
}

std::string tmp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kiln_test_gpt_" + name)).string();
}

bool is_conv1d(const std::string& n) {
  for (const char* s : {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"})
    if (n.size() >= std::string(s).size() && n.compare(n.size() - std::string(s).size(), std::string::npos, s) == 0)
      return true;
  return false;
}

}  // namespace

TEST_CASE("presets have the published shapes and parameter counts") {
  auto n = [](const char* name) { return GPT::count_parameters(models::gpt_config(name)); };
  CHECK(n("gpt-tiny") == 842496);
  CHECK(n("gpt2-124m") == 124475904);  // nanoGPT's gpt2 with vocab padded to 50304, tied head
  CHECK(n("gpt2-350m") == 354871296);
  CHECK(n("gpt2-774m") == 774090240);
  CHECK(n("gpt-1.3b") == 1315819520);
  // Without padding the counts are Hugging Face's gpt2 / gpt2-medium / gpt2-large.
  for (auto [name, hf] :
       {std::pair{"gpt2-124m", 124439808LL}, {"gpt2-350m", 354823168LL}, {"gpt2-774m", 774030080LL}}) {
    GPTConfig c = models::gpt_config(name);
    c.padded_vocab_size = c.vocab_size;
    CHECK(GPT::count_parameters(c) == hf);
  }
  // nanoGPT prints the non-embedding count (without wpe) of gpt2: 123.65M.
  GPTConfig g = models::gpt_config("gpt2-124m");
  g.padded_vocab_size = 50257;
  CHECK(GPT::count_parameters(g) - g.block_size * g.n_embd == 123653376);
  for (const auto& name : models::gpt_config_names()) {
    CAPTURE(name);
    GPTConfig c = models::gpt_config(name);
    CHECK(GPT::count_parameters(c) == expected_count(c));
    CHECK(c.n_embd % c.n_head == 0);
    CHECK(c.padded_vocab_size % 64 == 0);
  }
  CHECK(models::gpt_config("gpt2-350m").n_layer == 24);
  CHECK(models::gpt_config("gpt2-774m").n_head == 20);
  CHECK(models::gpt_config("gpt-1.3b").block_size == 2048);
  CHECK_ERROR_CONTAINS(models::gpt_config("gpt2-xl"), "gpt2-xl", "gpt-tiny", "gpt2-124m", "gpt-1.3b");
  CHECK(models::format_parameter_count(124475904) == "124.48M");
  CHECK(models::format_parameter_count(1315819520) == "1.32B");
}

TEST_CASE("the allocated model matches the closed-form count, with and without bias") {
  for (bool bias : {true, false}) {
    GPTConfig c = small_config();
    c.bias = bias;
    GPT model(c);
    CHECK(model.num_parameters() == GPT::count_parameters(c));
    CHECK(model.num_parameters() == expected_count(c));
    CHECK(model.num_parameters(true) == model.num_parameters() - c.block_size * c.n_embd);
  }
  GPT tiny(models::gpt_config("gpt-tiny"));
  CHECK(tiny.num_parameters() == 842496);
  std::ostringstream os;
  tiny.print_num_parameters(os);
  CHECK(os.str().find("842,496") != std::string::npos);
  GPTConfig bad = small_config();
  bad.n_head = 3;
  CHECK_ERROR_CONTAINS(GPT{bad}, "n_embd (16)", "n_head (3)");
  bad = small_config();
  bad.padded_vocab_size = 90;
  CHECK_ERROR_CONTAINS(GPT::count_parameters(bad), "padded_vocab_size (90)", "vocab_size (100)");
}

TEST_CASE("Hugging Face names, shapes and the tied head registered once") {
  GPTConfig c = small_config();
  GPT model(c);
  auto sd = model.state_dict();
  CHECK(sd.size() == size_t(4 + 12 * c.n_layer));
  std::map<std::string, Tensor> by(sd.begin(), sd.end());
  CHECK(sd.front().first == "transformer.wte.weight");
  CHECK(by.at("transformer.wte.weight").shape() == Shape{128, 16});
  CHECK(by.at("transformer.wpe.weight").shape() == Shape{16, 16});
  CHECK(by.at("transformer.h.1.attn.c_attn.weight").shape() == Shape{48, 16});
  CHECK(by.at("transformer.h.1.attn.c_attn.bias").shape() == Shape{48});
  CHECK(by.at("transformer.h.0.mlp.c_fc.weight").shape() == Shape{64, 16});
  CHECK(by.at("transformer.h.0.mlp.c_proj.weight").shape() == Shape{16, 64});
  CHECK(by.count("transformer.h.0.ln_1.weight") == 1);
  CHECK(by.count("transformer.ln_f.bias") == 1);
  CHECK(by.count("lm_head.weight") == 0);
  CHECK(model.lm_head_weight().data_ptr() == by.at("transformer.wte.weight").data_ptr());

  Tensor logits = model.forward(tokens({3, 10}, c.vocab_size, 1));
  CHECK(logits.shape() == Shape{3, 10, 128});
  CHECK_ERROR_CONTAINS(model.forward(tokens({1, 17}, c.vocab_size, 1)), "17", "block_size = 16");
  CHECK_ERROR_CONTAINS(model.forward(zeros({2, 3})), "integer token ids");
  CHECK_ERROR_CONTAINS(model.loss(tokens({2, 4}, 100, 1), tokens({2, 5}, 100, 2)), "[2, 5]");
}

TEST_CASE("GPT-2 initialisation: N(0, 0.02), scaled residual projections, zero biases, unit norms") {
  GPTConfig c = small_config();
  c.n_embd = 64;
  c.n_layer = 4;
  GPT model(c);
  auto stats = [](const Tensor& t) {
    auto v = test::values(t);
    double m = 0, s = 0;
    for (double x : v) m += x;
    m /= double(v.size());
    for (double x : v) s += (x - m) * (x - m);
    return std::pair{m, std::sqrt(s / double(v.size()))};
  };
  const double resid = 0.02 / std::sqrt(8.0);
  for (auto& [name, t] : model.named_parameters()) {
    CAPTURE(name);
    auto [mean, sd] = stats(t);
    if (name.find(".ln_") != std::string::npos) {
      CHECK(sd == 0.0);
      CHECK(mean == (name.ends_with(".weight") ? 1.0 : 0.0));
    } else if (name.ends_with(".bias")) {
      CHECK(sd == 0.0);
      CHECK(mean == 0.0);
    } else {
      const double want = name.ends_with("c_proj.weight") ? resid : 0.02;
      CHECK(std::fabs(mean) < 3 * want / std::sqrt(double(t.numel())) + 1e-12);
      CHECK(sd == doctest::Approx(want).epsilon(0.06));
    }
  }
}

TEST_CASE("the same seed gives the same model; another seed, another model") {
  GPTConfig c = small_config();
  GPT a(models::GPTOptions(c).seed(7)), b(models::GPTOptions(c).seed(7)), d(models::GPTOptions(c).seed(8));
  Generator g(7);
  GPT e(models::GPTOptions(c).generator(g));
  auto sa = a.state_dict(), sb = b.state_dict(), sd = d.state_dict(), se = e.state_dict();
  bool all_same = true, any_diff_d = false;
  for (size_t i = 0; i < sa.size(); ++i) {
    all_same = all_same && test::values(sa[i].second) == test::values(sb[i].second);
    any_diff_d = any_diff_d || test::values(sa[i].second) != test::values(sd[i].second);
  }
  CHECK(all_same);
  CHECK(any_diff_d);
  CHECK(test::values(sa[0].second) == test::values(se[0].second));  // generator seeded like seed 7

  // With dropout: same seed, same training losses; eval mode is deterministic and differs.
  c.dropout = 0.2;
  GPT p(models::GPTOptions(c).seed(3)), q(models::GPTOptions(c).seed(3));
  Tensor x = tokens({2, 12}, c.vocab_size, 5), y = tokens({2, 12}, c.vocab_size, 6);
  double lp1 = p.loss(x, y).item(), lp2 = p.loss(x, y).item(), lq1 = q.loss(x, y).item();
  CHECK(lp1 == lq1);
  CHECK(lp1 != lp2);  // the dropout generator advanced
  p.eval();
  double e1 = p.loss(x, y).item(), e2 = p.loss(x, y).item();
  CHECK(e1 == e2);
  CHECK(e1 != lp1);

  // Training with dropout spells attention out by hand; with p ~ 0 it must agree with the fused
  // causal attention used in eval.
  c.dropout = 1e-12;
  GPT r(models::GPTOptions(c).seed(4));
  const double train_loss = r.loss(x, y).item();
  r.eval();
  CHECK(train_loss == doctest::Approx(r.loss(x, y).item()).epsilon(1e-6));
}

TEST_CASE("causal: changing a future token leaves earlier logits unchanged") {
  GPTConfig c = small_config();
  GPT model(c);
  Tensor x = tokens({2, 12}, c.vocab_size, 11);
  Tensor x2 = x.clone();
  const int64_t k = 7;
  x2.data<int64_t>()[k] = (x.data<int64_t>()[k] + 13) % c.vocab_size;  // batch 0, position 7
  auto l1 = test::values(model.forward(x)), l2 = test::values(model.forward(x2));
  const int64_t v = c.padded_vocab_size;
  auto row = [&](const std::vector<double>& l, int64_t b, int64_t t) {
    return std::vector<double>(l.begin() + (b * 12 + t) * v, l.begin() + (b * 12 + t + 1) * v);
  };
  for (int64_t t = 0; t < k; ++t) test::check_close(row(l2, 0, t), row(l1, 0, t), 1e-6, 1e-7, "earlier position");
  CHECK(row(l2, 0, k) != row(l1, 0, k));
  CHECK(row(l2, 0, 11) != row(l1, 0, 11));
  for (int64_t t = 0; t < 12; ++t) CHECK(row(l2, 1, t) == row(l1, 1, t));  // other sequence untouched
}

TEST_CASE("tied head: wte's gradient sums the lookup's and the head's; padded rows get none") {
  GPTConfig c = small_config();
  GPT model(c);
  model.to(DType::f64);
  Tensor x = tokens({2, 6}, c.vocab_size, 21), y = tokens({2, 6}, c.vocab_size, 22);
  Tensor loss = model.loss(x, y);
  loss.backward();
  Tensor wte = model.transformer->wte->weight;
  Tensor grad = wte.grad();
  REQUIRE(grad.defined());
  // Finite differences on a token that is looked up (both uses) and on one that is not (head only).
  const int64_t used = x.data<int64_t>()[0];
  int64_t unused = 0;
  auto xs = test::values(x);
  while (std::find(xs.begin(), xs.end(), double(unused)) != xs.end()) ++unused;
  for (int64_t row : {used, unused}) {
    for (int64_t j : {0, 5}) {
      double* w = wte.data<double>() + row * c.n_embd + j;
      const double saved = *w, h = 1e-6;
      double plus, minus;
      {
        NoGradGuard ng;
        *w = saved + h;
        plus = model.loss(x, y).item();
        *w = saved - h;
        minus = model.loss(x, y).item();
        *w = saved;
      }
      CAPTURE(row);
      CAPTURE(j);
      const double g = grad.data<double>()[row * c.n_embd + j];
      CHECK(g != 0.0);
      CHECK(g == doctest::Approx((plus - minus) / (2 * h)).epsilon(1e-6));
    }
  }
  // Padded rows (>= vocab_size) get no probability, hence no gradient, and do not move the loss.
  auto gv = test::values(grad.slice(0, c.vocab_size, c.padded_vocab_size));
  for (double g : gv) REQUIRE(g == 0.0);
  const double before = model.loss(x, y).item();
  {
    NoGradGuard ng;
    wte.slice(0, c.vocab_size, c.padded_vocab_size).copy_(full({28, 16}, 50.0, DType::f64));
  }
  CHECK(model.loss(x, y).item() == before);
}

TEST_CASE("param_groups: 2-D weights and both embeddings decay; biases and LayerNorm do not") {
  for (bool bias : {true, false}) {
    CAPTURE(bias);
    GPTConfig c = small_config();
    c.bias = bias;
    GPT model(c);
    const std::vector<models::GPTParamGroup> groups = model.param_groups(0.1);
    REQUIRE(groups.size() == 2);
    CHECK(groups[0].weight_decay == 0.1);
    CHECK(groups[1].weight_decay == 0.0);
    // Exactly the split train_gpt made by hand (dim >= 2), in named_parameters() order.
    std::vector<const TensorImpl*> decay, no_decay;
    std::vector<std::string> decay_names;
    for (const auto& [name, p] : model.named_parameters()) {
      (p.dim() >= 2 ? decay : no_decay).push_back(p.impl());
      if (p.dim() >= 2) decay_names.push_back(name);
    }
    auto impls = [](const models::GPTParamGroup& g) {
      std::vector<const TensorImpl*> out;
      for (const Tensor& p : g.params) out.push_back(p.impl());
      return out;
    };
    CHECK(impls(groups[0]) == decay);
    CHECK(impls(groups[1]) == no_decay);
    // 2 embeddings + 4 Linear weights per block; 2 LayerNorms per block + ln_f (+ every bias).
    CHECK(decay.size() == size_t(2 + 4 * c.n_layer));
    CHECK(no_decay.size() == size_t((2 * c.n_layer + 1) * (bias ? 2 : 1) + (bias ? 4 * c.n_layer : 0)));
    CHECK(decay_names.front() == "transformer.wte.weight");
    CHECK(groups[0].params.size() + groups[1].params.size() == model.parameters().size());
  }
}

TEST_CASE("loss at init is about ln(vocab) and AdamW on a repeated batch drives it down") {
  GPTConfig c = models::gpt_config("gpt-tiny");  // byte-level vocabulary, narrower to stay quick
  c.n_layer = 2;
  c.n_embd = 64;
  GPT model(c);
  Tensor data = tokens({4, 17}, c.vocab_size, 31);
  Tensor x = data.slice(1, 0, 16).contiguous(), y = data.slice(1, 1, 17).contiguous();
  optim::AdamW opt(model.parameters(), optim::AdamWOptions(3e-3).weight_decay(0.0));
  std::vector<double> losses;
  for (int s = 0; s < 20; ++s) {
    opt.zero_grad(true);
    Tensor loss = model.loss(x, y);
    loss.backward();
    opt.step();
    losses.push_back(loss.item());
  }
  CHECK(losses.front() == doctest::Approx(std::log(256.0)).epsilon(0.03));
  CHECK(losses.back() < 0.7 * losses.front());
  for (size_t i = 1; i < losses.size(); ++i) CHECK(std::isfinite(losses[i]));
}

TEST_CASE("HF GPT-2 files: Conv1D weights transposed, vocabulary padded and sliced, tied lm_head") {
  GPTConfig c = small_config();
  GPT src(models::GPTOptions(c).seed(1));
  // An HF-layout file written by hand: GPT2Model names (no "transformer." prefix) for the blocks,
  // (in, out) Conv1D weights, 100 wte rows, the causal-mask buffer and a tied lm_head.weight.
  std::vector<std::pair<std::string, Tensor>> hf;
  std::map<std::string, Tensor> want;  // what the model must hold after loading
  for (auto& [name, t] : src.state_dict()) {
    Tensor v = t.clone();
    if (name == "transformer.wte.weight") {
      v = t.slice(0, 0, c.vocab_size).clone();
      want[name] = zeros({c.padded_vocab_size, c.n_embd});
      want[name].slice(0, 0, c.vocab_size).copy_(v);
    } else {
      want[name] = t.clone();
      if (is_conv1d(name)) v = t.t().contiguous();
    }
    std::string file_name = name.rfind("transformer.h.", 0) == 0 ? name.substr(12) : name;
    hf.emplace_back(file_name, v);
  }
  hf.emplace_back("h.0.attn.bias", ones({1, 1, c.block_size, c.block_size}));
  hf.emplace_back("lm_head.weight", src.state_dict().front().second.slice(0, 0, c.vocab_size).clone());
  const std::string path = tmp_path("hf.safetensors");
  save_safetensors(path, hf);

  GPT dst(models::GPTOptions(c).seed(2));
  models::load_gpt_hf(dst, path);
  for (auto& [name, t] : dst.state_dict()) {
    CAPTURE(name);
    CHECK(test::values(t) == test::values(want.at(name)));
  }
  // Same weights (padded rows aside), same logits over the real vocabulary.
  Tensor x = tokens({2, 8}, c.vocab_size, 3);
  test::check_close(dst.forward(x).slice(2, 0, c.vocab_size), test::values(src.forward(x).slice(2, 0, c.vocab_size)),
                    1e-6, 1e-7, "logits after load");

  // Saving writes HF's layout back.
  const std::string out = tmp_path("hf_out.safetensors");
  models::save_gpt_hf(dst, out);
  SafetensorsFile f = load_safetensors(out);
  CHECK(!f.contains("lm_head.weight"));
  CHECK(f.at("transformer.wte.weight").shape() == Shape{100, 16});
  CHECK(f.at("transformer.h.0.attn.c_attn.weight").shape() == Shape{16, 48});
  CHECK(f.at("transformer.h.1.mlp.c_fc.weight").shape() == Shape{16, 64});
  CHECK(f.at("transformer.h.1.mlp.c_proj.weight").shape() == Shape{64, 16});
  CHECK(test::values(f.at("transformer.h.1.attn.c_proj.weight")) ==
        test::values(src.transformer->block(1).attn->c_proj->weight.t()));
  GPT again(models::GPTOptions(c).seed(3));
  models::load_gpt_hf(again, out);
  for (auto& [name, t] : again.state_dict()) CHECK(test::values(t) == test::values(want.at(name)));

  // Problems are reported with names: an untied head, a missing tensor, an unexpected one.
  hf.back().second = hf.back().second * 2.0;
  save_safetensors(path, hf);
  CHECK_ERROR_CONTAINS(models::load_gpt_hf(dst, path), "lm_head.weight", "not equal");
  hf.pop_back();
  hf.erase(hf.begin() + 2);  // h.0.ln_1.weight
  hf.emplace_back("h.9.mlp.c_fc.weight", zeros({16, 64}));
  save_safetensors(path, hf);
  CHECK_ERROR_CONTAINS(models::load_gpt_hf(dst, path), "missing (1): transformer.h.0.ln_1.weight",
                       "unexpected (1): transformer.h.9.mlp.c_fc.weight");
  std::filesystem::remove(path);
  std::filesystem::remove(out);
}
