// agree_on_checkpoint (checkpoint_agreement.h): list, propose, all-gather, intersect.
#include <kiln/parallel/checkpoint_agreement.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include <kiln/core/error.h>
#include <kiln/core/factory.h>
#include <kiln/optim/checkpoint.h>

namespace kiln::dist {
namespace {

namespace fs = std::filesystem;

// Note [Agreeing on a checkpoint]
// Every rank must resume the same state, but each sees its own directory: on node-local disks a
// checkpoint written by rank 0 exists on one host only, and a copy may lag or differ. So each
// rank proposes its newest kMaxCheckpointProposals checkpoints as (global_step, checksum), where
// checksum is the 64-bit content hash save_checkpoint stores in the header (cheap: no data is
// read), all ranks all-gather the proposals, and the newest pair that every rank proposed wins.
// With no common checkpoint the job starts from step 0, like a torchrun script that finds no
// snapshot, and says which newer checkpoints it skipped and why, on every rank identically.

struct Proposal {
  int64_t step;
  uint64_t checksum;
  fs::path path;
};

// "step_<N>.safetensors" -> N, or -1.
int64_t step_of(const std::string& name) {
  const std::string prefix = "step_", suffix = ".safetensors";
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  int64_t step = -1;
  const char* b = name.data() + prefix.size();
  const char* e = name.data() + name.size() - suffix.size();
  auto [end, ec] = std::from_chars(b, e, step);
  return ec == std::errc() && end == e ? step : -1;
}

// The checkpoint's global_step and checksum from its safetensors header; throws when unreadable.
std::pair<int64_t, uint64_t> read_header(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK_IO(in.good(), "cannot open");
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  KILN_CHECK_IO(in.gcount() == 8, "truncated header");
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | len_bytes[i];
  KILN_CHECK_IO(len > 0 && len <= (uint64_t(100) << 20), "header length ", len, " out of range");
  std::string header(len, '\0');
  in.read(header.data(), std::streamsize(len));
  KILN_CHECK_IO(uint64_t(in.gcount()) == len, "truncated header");
  const auto json = nlohmann::json::parse(header, nullptr, false);
  KILN_CHECK_IO(json.is_object() && json.contains("__metadata__") && json["__metadata__"].is_object(),
                "no metadata in the header");
  // A cut tail (a copy or a write that stopped short) shows in the size: the data must end where
  // the header says, checked here without reading it.
  uint64_t data_end = 0;
  for (const auto& [name, entry] : json.items()) {
    if (name == "__metadata__") continue;
    KILN_CHECK_IO(entry.is_object() && entry.contains("data_offsets") && entry["data_offsets"].is_array() &&
                      entry["data_offsets"].size() == 2 && entry["data_offsets"][1].is_number_unsigned(),
                  "tensor '", name, "' has no data_offsets");
    data_end = std::max<uint64_t>(data_end, entry["data_offsets"][1].get<uint64_t>());
  }
  std::error_code size_ec;
  const uint64_t size = fs::file_size(path, size_ec);
  KILN_CHECK_IO(!size_ec && size == 8 + len + data_end, "truncated: the file has ", size, " bytes, its header "
                "describes ", 8 + len + data_end);
  const auto& meta = json["__metadata__"];
  KILN_CHECK_IO(meta.contains("global_step") && meta["global_step"].is_string() && meta.contains("checksum") &&
                    meta["checksum"].is_string(),
                "metadata lacks global_step or checksum (not a Kiln checkpoint?)");
  const std::string step_text = meta["global_step"], sum_text = meta["checksum"];
  int64_t step = -1;
  uint64_t sum = 0;
  auto [e1, c1] = std::from_chars(step_text.data(), step_text.data() + step_text.size(), step);
  auto [e2, c2] = std::from_chars(sum_text.data(), sum_text.data() + sum_text.size(), sum, 16);
  KILN_CHECK_IO(c1 == std::errc() && e1 == step_text.data() + step_text.size() && c2 == std::errc() &&
                    e2 == sum_text.data() + sum_text.size(),
                "malformed global_step or checksum");
  return {step, sum};
}

// A checkpoint found damaged is renamed aside, never deleted: "<name>.corrupt" no longer matches
// step_<N>.safetensors, so no later start proposes it, and it stays for inspection. Another rank
// on a shared file system may have renamed it first.
void set_aside(const fs::path& path) {
  std::error_code ec;
  fs::rename(path, fs::path(path.string() + ".corrupt"), ec);
}

std::string rank_list(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// Every rank's row of int64 (the same length on all), rank-major; this rank's alone without a group.
std::vector<int64_t> allgather_rows(ProcessGroup* group, const std::vector<int64_t>& local) {
  if (!group || group->size() == 1) return local;
  const int64_t row = int64_t(local.size());
  Tensor in = empty({row}, TensorOptions(DType::i64));
  std::memcpy(in.data_ptr(), local.data(), local.size() * 8);
  Tensor dev_in = in.to(group->device());
  Tensor dev_out = empty({group->size() * row}, TensorOptions(DType::i64).device(group->device()));
  group->allgather(dev_out, dev_in)->wait();
  Tensor host = dev_out.to(Device::cpu());
  std::vector<int64_t> all(size_t(group->size() * row));
  std::memcpy(all.data(), host.data_ptr(), all.size() * 8);
  return all;
}

// The newest (step, checksum) every rank proposed, skipping the steps in `bad`; `skipped` gets the
// newer ones not used and why (identically on every rank).
AgreedCheckpoint pick(const std::vector<std::map<int64_t, uint64_t>>& seen, const std::vector<Proposal>& mine,
                      const std::set<int64_t>& bad) {
  AgreedCheckpoint out;
  const int world = int(seen.size());
  std::map<int64_t, std::map<uint64_t, int>, std::greater<>> candidates;
  for (const auto& s : seen)
    for (const auto& [step, sum] : s)
      if (!bad.count(step)) ++candidates[step][sum];
  for (const auto& [step, sums] : candidates) {
    for (const auto& [sum, count] : sums) {
      if (count == world) {
        out.step = step;
        for (const Proposal& p : mine)
          if (p.step == step && p.checksum == sum) out.path = p.path.string();
        break;
      }
    }
    if (out.step >= 0) break;
    // Skipped: say which ranks lack it or hold other content.
    std::vector<int> missing, different;
    const uint64_t first = sums.begin()->first;
    for (int r = 0; r < world; ++r) {
      auto it = seen[size_t(r)].find(step);
      if (it == seen[size_t(r)].end()) missing.push_back(r);
      else if (it->second != first) different.push_back(r);
    }
    std::string why = "step_" + std::to_string(step) + ".safetensors: ";
    if (!missing.empty()) why += "missing on rank(s) " + rank_list(missing);
    if (!different.empty())
      why += std::string(missing.empty() ? "" : "; ") + "different content on rank(s) " + rank_list(different);
    out.skipped.push_back(why);
  }
  KILN_ASSERT(out.step < 0 || !out.path.empty(), "the agreed checkpoint is not among this rank's own");
  return out;
}

}  // namespace

AgreedCheckpoint agree_on_checkpoint(ProcessGroup* group, const std::string& dir) {
  // This rank's proposals, newest first.
  std::vector<std::pair<int64_t, fs::path>> files;
  std::error_code ec;
  if (!dir.empty() && fs::is_directory(dir, ec))
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const int64_t step = step_of(entry.path().filename().string());
      if (step >= 0 && entry.is_regular_file(ec)) files.emplace_back(step, entry.path());
    }
  std::sort(files.begin(), files.end(), [](auto& a, auto& b) { return a.first > b.first; });
  // Partial writes of a process killed while it saved (save_safetensors writes <name>.tmp, then
  // renames): nothing writes to this directory while the job starts, so they can only be stale.
  std::vector<std::string> removed;
  if (!dir.empty() && fs::is_directory(dir, ec))
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("step_", 0) == 0 && name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0 &&
          entry.is_regular_file(ec)) {
        const auto bytes = entry.file_size(ec);
        if (fs::remove(entry.path(), ec))
          removed.push_back(name + ": a partial write (" + std::to_string(bytes) + " bytes), removed");
      }
    }
  std::vector<Proposal> mine;
  std::vector<std::string> unreadable;
  for (const auto& [step, path] : files) {
    if (int(mine.size()) == kMaxCheckpointProposals) break;
    try {
      auto [s, sum] = read_header(path);
      mine.push_back({s, sum, path});
    } catch (const Error& e) {
      unreadable.push_back(path.filename().string() + ": unreadable here (" + e.what() + "); renamed aside as " +
                           path.filename().string() + ".corrupt");
      set_aside(path);
    }
  }

  // All ranks' proposals: a row of 1 + 2K int64 per rank, [count, step, checksum, ...].
  const int world = group ? group->size() : 1;
  const int64_t row = 1 + 2 * kMaxCheckpointProposals;
  std::vector<int64_t> local(size_t(row), 0);
  local[0] = int64_t(mine.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    local[1 + 2 * i] = mine[i].step;
    std::memcpy(&local[2 + 2 * i], &mine[i].checksum, 8);
  }
  const std::vector<int64_t> all = allgather_rows(group, local);
  // rank -> (step -> checksum)
  std::vector<std::map<int64_t, uint64_t>> seen(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const int64_t* p = all.data() + r * row;
    for (int64_t i = 0; i < std::min<int64_t>(p[0], kMaxCheckpointProposals); ++i) {
      uint64_t sum = 0;
      std::memcpy(&sum, &p[2 + 2 * i], 8);
      seen[size_t(r)][p[1 + 2 * i]] = sum;
    }
  }
  // Note [Verifying the agreed checkpoint]: the headers say which checkpoint every rank has, not
  // whether its data survived (a flipped byte, a bad copy). Each rank reads the one picked and checks
  // it against its checksum (optim::verify_checkpoint: one read of the file before the load reads it
  // again); if it fails on any rank, every rank sets that step aside and picks again.
  std::set<int64_t> bad;
  std::vector<std::string> corrupt;
  AgreedCheckpoint out;
  for (;;) {
    out = pick(seen, mine, bad);
    if (out.step < 0) break;
    std::string why;
    try {
      optim::verify_checkpoint(out.path);
    } catch (const Error& e) {
      why = e.what();
      set_aside(fs::path(out.path));
    }
    const std::vector<int64_t> failed = allgather_rows(group, {why.empty() ? 0 : 1});
    std::vector<int> ranks;
    for (int r = 0; r < world; ++r)
      if (failed[size_t(r)]) ranks.push_back(r);
    if (ranks.empty()) break;
    const std::string name = fs::path(out.path).filename().string();
    corrupt.push_back(name + ": its data does not match its checksum on rank(s) " + rank_list(ranks) +
                      "; renamed aside as " + name + ".corrupt there" + (world == 1 ? " (" + why + ")" : ""));
    bad.insert(out.step);
  }
  for (std::string& c : corrupt) out.skipped.push_back(std::move(c));
  for (std::string& u : unreadable) out.skipped.push_back(std::move(u));
  for (std::string& r : removed) out.skipped.push_back(std::move(r));
  return out;
}

std::string describe(const AgreedCheckpoint& agreed, const std::string& dir) {
  std::string s = agreed.step >= 0 ? "resuming from " + agreed.path + " (step " + std::to_string(agreed.step) +
                                         ", the newest checkpoint every rank has)"
                                   : "no checkpoint in " + dir + " common to all ranks: starting from step 0";
  for (const std::string& k : agreed.skipped) s += "\n  not used: " + k;
  return s;
}

}  // namespace kiln::dist
