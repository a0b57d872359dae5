// Writes the seed corpora under fuzz/corpus/<name>/ (committed; rerun after a format change):
//   kiln_fuzz_seeds DIR
// Small valid inputs of every reader's format, plus a few near-misses, so the fuzzers start from
// the interesting paths instead of discovering each magic number and JSON key on their own.
#include <filesystem>
#include <fstream>

#include <kiln/core/factory.h>
#include <kiln/core/io/safetensors.h>
#include <kiln/data/cifar10.h>
#include <kiln/data/token_shard.h>
#include <kiln/models/gpt.h>
#include <kiln/optim/adamw.h>
#include <kiln/optim/checkpoint.h>

#include "tcp_store_detail.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_bytes(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

Tensor iota(Shape shape, DType dtype) {
  Tensor t = arange(0, double(shape_numel(shape))).to(dtype);
  return t.reshape(shape).contiguous();
}

// One step of the store fuzzer's script: `bytes` arriving from client `slot`, split in chunks of
// at most 255 bytes.
void send(std::string& script, int slot, const std::string& bytes) {
  for (size_t at = 0; at < bytes.size(); at += 255) {
    const size_t n = std::min<size_t>(255, bytes.size() - at);
    script += char(slot);
    script += char(n);
    script += bytes.substr(at, n);
  }
}
std::string frame(uint8_t tag, std::vector<std::string> items) {
  std::string out;
  dist::tcp::encode_frame(dist::tcp::Frame{tag, std::move(items)}, out);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR   (writes DIR/<harness>/seed_*)\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  for (const char* d : {"token_shard", "safetensors", "checkpoint", "cifar10", "gpt_config", "store_protocol"})
    fs::create_directories(root / d);

  // Token shards: 16 tokens, none, and a truncated one.
  std::vector<uint16_t> tokens;
  for (int i = 0; i < 16; ++i) tokens.push_back(uint16_t(i * 4099));
  data::write_token_shard((root / "token_shard/seed_16_tokens").string(), tokens);
  data::write_token_shard((root / "token_shard/seed_empty").string(), {});
  write_bytes(root / "token_shard/seed_truncated", read_bytes(root / "token_shard/seed_16_tokens").substr(0, 1030));

  // Safetensors: every dtype, a scalar, an empty tensor, metadata.
  save_safetensors((root / "safetensors/seed_dtypes").string(),
                   {{"f32", iota({2, 3}, DType::f32)}, {"f64", iota({2}, DType::f64)}, {"bf16", iota({3}, DType::bf16)},
                    {"f16", iota({1, 2}, DType::f16)}, {"i64", iota({2}, DType::i64)}, {"i32", iota({3}, DType::i32)},
                    {"u8", iota({4}, DType::u8)}, {"bool", iota({3}, DType::b8)}},
                   {{"format", "pt"}});
  save_safetensors((root / "safetensors/seed_scalar_empty").string(),
                   {{"scalar", full({}, 2.5)}, {"empty", zeros({0, 3})}});
  save_safetensors((root / "safetensors/seed_none").string(), {});

  // Checkpoints for fuzz_checkpoint's model: w (4, 3), b (3), AdamW amsgrad, after one step.
  {
    Tensor w = zeros({4, 3}), b = zeros({3});
    optim::AdamW opt(std::vector<Tensor>{w, b}, optim::AdamWOptions(0.01).amsgrad(true));
    w.set_grad(ones({4, 3}));
    b.set_grad(ones({3}));
    opt.step();
    optim::TrainingProgress p;
    p.global_step = 1;
    p.scheduler_step = 1;
    p.rng = {{42, 7}};
    p.data_cursor = "shard=0 pos=4096";
    optim::save_checkpoint((root / "checkpoint/seed_step1").string(), {{"layer.weight", w}, {"layer.bias", b}}, opt,
                           p);
    p.extra = {{"grad_scaler.scale", full({}, 65536.0)}};
    p.rng.clear();
    p.data_cursor.clear();
    optim::save_checkpoint((root / "checkpoint/seed_extra").string(), {{"layer.weight", w}, {"layer.bias", b}}, opt,
                           p);
  }

  // CIFAR-10: one record per class label 3 and 9, and one with the invalid label 10.
  {
    std::string rec(data::kCifarRecordBytes, '\0');
    for (size_t i = 1; i < rec.size(); ++i) rec[i] = char(i * 7);
    rec[0] = 3;
    std::string two = rec;
    rec[0] = 9;
    two += rec;
    write_bytes(root / "cifar10/seed_two_records", two);
    rec[0] = 10;
    write_bytes(root / "cifar10/seed_bad_label", rec);
  }

  // GPT configs: gpt-tiny, and one with dropout and no bias.
  {
    models::GPTConfig c = models::gpt_config("gpt-tiny");
    write_bytes(root / "gpt_config/seed_tiny", c.to_json(2));
    c.dropout = 0.1;
    c.bias = false;
    write_bytes(root / "gpt_config/seed_dropout", c.to_json());
  }

  // Store scripts: every request kind, a GET parked until another client sets its key, a WAIT
  // cancelled, an ADD on a non-number, replies drained.
  {
    using namespace dist::tcp;
    std::string s;
    send(s, 0, frame(kSet, {"key", "value"}));
    send(s, 0, frame(kGet, {"key"}));
    send(s, 0, frame(kAdd, {"n", encode_i64(5)}));
    send(s, 0, frame(kCheck, {"n"}));
    s += char(0 | 2 << 2);  // client 0 reads
    send(s, 1, frame(kGet, {"later"}));
    send(s, 2, frame(kWait, {"a", "b"}));
    send(s, 0, frame(kSet, {"later", "x"}));
    send(s, 2, frame(kCancel, {}));
    send(s, 0, frame(kAdd, {"key", encode_i64(1)}));
    s += char(1 | 2 << 2);
    s += char(2 | 2 << 2);
    s += char(0 | 2 << 2);
    write_bytes(root / "store_protocol/seed_session", s);
    std::string d;
    send(d, 0, frame(kWait, {"gone"}));
    d += char(0 | 1 << 2);  // client 0 disconnects while parked
    send(d, 1, frame(kSet, {"gone", "v"}));
    d += char(1 | 2 << 2);
    write_bytes(root / "store_protocol/seed_disconnect", d);
    // A token-protected server (leading 0xA5, see the harness): a request before HELLO, a wrong
    // token, the right one, a value over the limit, the store filled up, a fourth connection.
    std::string t(1, char(0xA5));
    send(t, 0, frame(kSet, {"k", "v"}));
    send(t, 1, frame(kHello, {"wrong"}));
    send(t, 2, frame(kHello, {"fuzz-token"}));
    send(t, 2, frame(kSet, {"big", std::string(64, 'x')}));
    send(t, 2, frame(kSet, {"a", std::string(39, 'a')}));
    send(t, 2, frame(kSet, {"b", std::string(39, 'b')}));
    send(t, 2, frame(kSet, {"c", std::string(39, 'c')}));
    send(t, 2, frame(kSet, {"d", std::string(39, 'd')}));
    send(t, 2, frame(kSet, {"e", std::string(39, 'e')}));
    send(t, 2, frame(kAdd, {"n", encode_i64(1)}));
    send(t, 3, frame(kHello, {"fuzz-token"}));
    t += char(2 | 2 << 2);
    t += char(3 | 2 << 2);
    write_bytes(root / "store_protocol/seed_token_limits", t);
  }
  std::printf("seeds written under %s\n", root.c_str());
  return 0;
}
