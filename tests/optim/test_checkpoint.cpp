// Training checkpoints: a round trip restores weights, optimizer state, steps, RNG states and the
// data cursor so that the next steps are bit-identical; damaged, truncated or mismatched files are
// refused with an error naming the file and the problem, leaving the model and optimizer untouched.
#include "test_util.h"

#include <filesystem>
#include <fstream>

#include <unistd.h>

using namespace kiln;

namespace {

// A per-process scratch directory, removed when the test program exits.
struct ScratchDir {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kiln_optim_ckpt_" + std::to_string(::getpid()));
  ScratchDir() { std::filesystem::create_directories(dir); }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

std::string tmp_path(const std::string& name) {
  static ScratchDir scratch;
  return (scratch.dir / name).string();
}

struct Model {
  Tensor w = test::random({4, 3}, DType::f32, 1);
  Tensor b = test::random({3}, DType::f32, 2);
  optim::NamedTensors named() const { return {{"layer.weight", w}, {"layer.bias", b}}; }
};

void set_grads(const Model& m, int64_t step) {
  m.w.set_grad(test::random({4, 3}, DType::f32, 100 + step));
  m.b.set_grad(test::random({3}, DType::f32, 200 + step));
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}
void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

optim::TrainingProgress progress() {
  optim::TrainingProgress p;
  p.global_step = 3;
  p.scheduler_step = 3;
  p.rng = {{42, 1000}, {0xFFFFFFFFFFFFFFFFull, 7}};
  p.data_cursor = std::string("shard=2\0pos=\xff\x01", 14);
  return p;
}

}  // namespace

TEST_CASE("round trip: the resumed run takes exactly the same next steps") {
  const std::string path = tmp_path("roundtrip.safetensors");
  Model m;
  optim::AdamW opt(std::vector<Tensor>{m.w, m.b}, optim::AdamWOptions(0.01).weight_decay(0.1).amsgrad(true));
  optim::LRScheduler sched(opt, optim::warmup_cosine_schedule(optim::WarmupCosineOptions(2, 10)));
  for (int64_t s = 0; s < 3; ++s) {
    set_grads(m, s);
    opt.step();
    sched.step();
  }
  optim::save_checkpoint(path, m.named(), opt, progress());
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));

  // Continue the original for three more steps.
  for (int64_t s = 3; s < 6; ++s) {
    set_grads(m, s);
    opt.step();
    sched.step();
  }
  // A fresh model and optimizer, restored from the file.
  Model r;
  r.w = test::random({4, 3}, DType::f32, 50);
  r.b = test::random({3}, DType::f32, 51);
  optim::AdamW ropt(std::vector<Tensor>{r.w, r.b}, optim::AdamWOptions(0.01).weight_decay(0.1).amsgrad(true));
  optim::LRScheduler rsched(ropt, optim::warmup_cosine_schedule(optim::WarmupCosineOptions(2, 10)));
  optim::TrainingProgress p = optim::load_checkpoint(path, r.named(), ropt);
  rsched.set_step(p.scheduler_step);
  CHECK(p.global_step == 3);
  CHECK(p.scheduler_step == 3);
  REQUIRE(p.rng.size() == 2);
  CHECK(p.rng[1].seed == 0xFFFFFFFFFFFFFFFFull);
  CHECK(p.rng[1].offset == 7);
  CHECK(p.data_cursor == progress().data_cursor);
  CHECK(ropt.state(0, 0).step == 3);
  CHECK(ropt.state(0, 1).buffers.size() == 3);
  Generator gen;
  p.rng[0].restore(gen);
  CHECK(gen.seed() == 42);
  CHECK(gen.offset() == 1000);
  for (int64_t s = 3; s < 6; ++s) {
    set_grads(r, s);
    ropt.step();
    rsched.step();
  }
  test::check_close(r.w, test::values(m.w), 0, 0, "weight after resumed steps");
  test::check_close(r.b, test::values(m.b), 0, 0, "bias after resumed steps");
  CHECK(ropt.lr(0) == opt.lr(0));
}

TEST_CASE("SGD state_dict round trip through a checkpoint") {
  const std::string path = tmp_path("sgd.safetensors");
  Model m;
  optim::SGD opt({m.w, m.b}, optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
  set_grads(m, 0);
  opt.step();
  optim::save_checkpoint(path, m.named(), opt, {});
  Model r;
  optim::SGD ropt({r.w, r.b}, optim::SGDOptions(0.5));
  optim::TrainingProgress p = optim::load_checkpoint(path, r.named(), ropt);
  CHECK(p.data_cursor.empty());
  CHECK(p.rng.empty());
  CHECK(ropt.options(0).nesterov());
  CHECK(ropt.options(0).momentum() == 0.9);
  CHECK(ropt.lr(0) == 0.1);
  set_grads(m, 1);
  set_grads(r, 1);
  opt.step();
  ropt.step();
  test::check_close(r.w, test::values(m.w), 0, 0, "SGD resumed");
}

TEST_CASE("bad files are refused before anything is touched") {
  const std::string path = tmp_path("good.safetensors");
  Model m;
  optim::AdamW opt({m.w, m.b}, optim::AdamWOptions(0.01));
  set_grads(m, 0);
  opt.step();
  optim::save_checkpoint(path, m.named(), opt, progress());
  const std::vector<char> good = read_bytes(path);

  // The victim: a model and optimizer with their own, different state.
  Model v;
  optim::AdamW vopt({v.w, v.b}, optim::AdamWOptions(0.5));
  set_grads(v, 9);
  vopt.step();
  const auto w_before = test::values(v.w);
  const auto m_before = test::values(vopt.state(0, 0).buffers.at("exp_avg"));
  auto untouched = [&] {
    test::check_close(v.w, w_before, 0, 0, "model untouched");
    test::check_close(vopt.state(0, 0).buffers.at("exp_avg"), m_before, 0, 0, "optimizer state untouched");
    CHECK(vopt.lr(0) == 0.5);
  };

  SUBCASE("truncated") {
    const std::string bad = tmp_path("truncated.safetensors");
    write_bytes(bad, std::vector<char>(good.begin(), good.end() - 9));
    CHECK_ERROR_CONTAINS(optim::load_checkpoint(bad, v.named(), vopt), "load_checkpoint", bad.c_str(), "truncated");
    write_bytes(bad, std::vector<char>(good.begin(), good.begin() + 5));
    CHECK_ERROR_CONTAINS(optim::load_checkpoint(bad, v.named(), vopt), bad.c_str());
  }
  SUBCASE("a flipped byte in the data section") {
    std::vector<char> bytes = good;
    bytes[bytes.size() - 40] ^= 0x10;
    const std::string bad = tmp_path("flipped.safetensors");
    write_bytes(bad, bytes);
    CHECK_ERROR_CONTAINS(optim::load_checkpoint(bad, v.named(), vopt), bad.c_str(), "checksum mismatch", "corrupt");
  }
  SUBCASE("a damaged header") {
    std::vector<char> bytes = good;
    bytes[12] = '#';
    const std::string bad = tmp_path("header.safetensors");
    write_bytes(bad, bytes);
    CHECK_ERROR_CONTAINS(optim::load_checkpoint(bad, v.named(), vopt), bad.c_str());
  }
  SUBCASE("missing file") {
    CHECK_ERROR_CONTAINS(optim::load_checkpoint(tmp_path("nope.safetensors"), v.named(), vopt), "nope.safetensors");
  }
  SUBCASE("a plain safetensors file is not a checkpoint") {
    const std::string bad = tmp_path("plain.safetensors");
    save_safetensors(bad, {{"x", m.w}});
    CHECK_ERROR_CONTAINS(optim::load_checkpoint(bad, v.named(), vopt), bad.c_str(), "not a Kiln checkpoint");
  }
  SUBCASE("another format version") {
    SafetensorsFile f = load_safetensors(path);
    f.metadata["format_version"] = "2";
    const std::string bad = tmp_path("v2.safetensors");
    save_safetensors(bad, f.tensors, f.metadata);
    CHECK_ERROR_CONTAINS(optim::load_checkpoint(bad, v.named(), vopt), bad.c_str(), "format version 2",
                         "reads version 1");
  }
  SUBCASE("a model tensor missing, misshapen, or unexpected") {
    optim::NamedTensors extra = v.named();
    extra.emplace_back("layer.scale", zeros({3}));
    CHECK_ERROR_CONTAINS(optim::load_checkpoint(path, extra, vopt), "model tensor 'layer.scale' is missing");
    Tensor other = zeros({4, 4});
    CHECK_ERROR_CONTAINS(optim::load_checkpoint(path, {{"layer.weight", other}, {"layer.bias", v.b}}, vopt),
                         "'layer.weight'", "[4, 3]", "[4, 4]");
    CHECK_ERROR_CONTAINS(optim::load_checkpoint(path, {{"layer.weight", v.w}}, vopt),
                         "unexpected model tensor 'layer.bias'");
    Tensor f64 = zeros({3}, DType::f64);
    CHECK_ERROR_CONTAINS(optim::load_checkpoint(path, {{"layer.weight", v.w}, {"layer.bias", f64}}, vopt),
                         "'layer.bias'", "f64");
  }
  SUBCASE("optimizer state that does not fit") {
    optim::SGD sgd({v.w, v.b}, optim::SGDOptions(0.1));
    CHECK_ERROR_CONTAINS(optim::load_checkpoint(path, v.named(), sgd), "AdamW optimizer, not of a SGD");
    Tensor z = zeros({2});
    optim::AdamW three({v.w, v.b, z}, optim::AdamWOptions(0.5));
    CHECK_ERROR_CONTAINS(optim::load_checkpoint(path, v.named(), three), "group 0 holds 2 parameters",
                         "3 in this optimizer");
    // Damaged state dicts, checked by load_state_dict itself (what load_checkpoint runs first).
    optim::NamedTensors dict = opt.state_dict();
    std::erase_if(dict, [](const auto& kv) { return kv.first == "state.0.1.exp_avg_sq"; });
    CHECK_ERROR_CONTAINS(vopt.load_state_dict(dict), "missing 'state.0.1.exp_avg_sq'");
    dict = opt.state_dict();
    std::erase_if(dict, [](const auto& kv) { return kv.first == "param_groups.0.beta2"; });
    CHECK_ERROR_CONTAINS(vopt.load_state_dict(dict), "missing hyper-parameter 'param_groups.0.beta2'");
    dict = opt.state_dict();
    dict.emplace_back("state.0.0.momentum_buffer", zeros({4, 3}));
    CHECK_ERROR_CONTAINS(vopt.load_state_dict(dict), "unexpected key 'state.0.0.momentum_buffer'");
    dict = opt.state_dict();
    for (auto& [k, t] : dict)
      if (k == "state.0.0.exp_avg") t = zeros({3, 4});
    CHECK_ERROR_CONTAINS(vopt.load_state_dict(dict), "'state.0.0.exp_avg'", "[3, 4]", "[4, 3]");
    dict = opt.state_dict();
    for (auto& [k, t] : dict)
      if (k == "param_groups.0.beta1") t = scalar_tensor(1.5, DType::f64);
    CHECK_ERROR_CONTAINS(vopt.load_state_dict(dict), "invalid beta1", "1.5");
  }
  untouched();
}

TEST_CASE("the optimizer state_dict is a safetensors-ready list of named tensors") {
  Model m;
  optim::SGD opt({m.w, m.b}, optim::SGDOptions(0.1).momentum(0.5));
  m.w.set_grad(test::random({4, 3}, DType::f32, 3));  // b gets no gradient: no state
  opt.step();
  optim::NamedTensors dict = opt.state_dict();
  std::map<std::string, Tensor> d(dict.begin(), dict.end());
  CHECK(d.at("param_groups.0.num_params").item() == 2);
  CHECK(d.at("param_groups.0.lr").item() == 0.1);
  CHECK(d.at("param_groups.0.momentum").item() == 0.5);
  CHECK(d.at("param_groups.0.nesterov").item() == 0);
  CHECK(d.at("state.0.0.step").item() == 1);
  CHECK(d.at("state.0.0.momentum_buffer").shape() == Shape{4, 3});
  CHECK(d.count("state.0.1.step") == 0);
  const std::string path = tmp_path("dict.safetensors");
  save_safetensors(path, dict);
  optim::SGD back({m.w, m.b}, optim::SGDOptions(0.9));
  back.load_state_dict(load_safetensors(path).tensors);
  CHECK(back.options(0).momentum() == 0.5);
  test::check_close(back.state(0, 0).buffers.at("momentum_buffer"),
                    test::values(opt.state(0, 0).buffers.at("momentum_buffer")), 0, 0, "buffer");
  CHECK_FALSE(back.state(0, 0).buffers.at("momentum_buffer").is_same(opt.state(0, 0).buffers.at("momentum_buffer")));
}
