// Fuzzes the TCP store server's protocol handling (parallel/tcp_store_server_core.h) as the server
// sees it: up to four clients whose byte streams, disconnects and reads interleave as the input
// says. The input is a script of operations; each starts with one byte `op`:
//   op & 3         the client slot (a slot whose client was dropped connects a new one)
//   (op >> 2) & 3  0 or 3: the next byte is a length L, the L bytes after it arrive from that client
//                  1: the client disconnects   2: the client reads (drains) its replies
// After each operation the server handles every complete frame, as its poll loop does. Checked:
// every reply the server queues is a well-formed frame with a reply tag, and each parked client is
// listed exactly once, under the key it waits for.
#include <map>
#include <set>

#include "fuzz_input.h"
#include "tcp_store_server_core.h"

namespace {

using namespace kiln::dist::tcp;

void check_replies(const std::string& out) {
  size_t pos = 0;
  while (pos < out.size()) {
    Frame f;
    size_t used = 0;
    const Parse p = parse_frame(out.data() + pos, out.size() - pos, f, used);
    kiln::fuzz::check(p == Parse::done, "the server queued a malformed reply frame");
    kiln::fuzz::check(f.tag == kOk || f.tag == kCancelled || f.tag == kError, "a reply carries a request tag");
    pos += used;
  }
}

void check_waiters(ServerCore& core) {
  std::set<uint64_t> listed;
  for (const auto& [key, ids] : core.waiters()) {
    kiln::fuzz::check(!ids.empty(), "an empty waiter list was kept");
    for (uint64_t id : ids) {
      kiln::fuzz::check(listed.insert(id).second, "a parked client is listed twice");
      auto it = core.clients().find(id);
      kiln::fuzz::check(it != core.clients().end(), "a waiter list names a dropped client");
      kiln::fuzz::check(it->second.parked && it->second.parked_on == key, "a waiter list names a client not parked on that key");
    }
  }
  for (const auto& [id, c] : core.clients())
    kiln::fuzz::check(!c.parked || listed.count(id), "a parked client is in no waiter list: it would never be answered");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::run_reader([&] {
    ServerCore core;
    std::map<int, uint64_t> slots;
    auto client = [&](int slot) -> ClientState& {
      auto it = slots.find(slot);
      if (it == slots.end() || !core.clients().count(it->second)) it = slots.insert_or_assign(slot, core.add_client()).first;
      return core.clients().at(it->second);
    };
    size_t pos = 0;
    while (pos < size) {
      const uint8_t op = data[pos++];
      ClientState& c = client(op & 3);
      switch ((op >> 2) & 3) {
        case 1: c.dead = true; break;
        case 2: check_replies(c.out); c.out.clear(); break;
        default: {
          size_t len = 0;
          if (pos < size) {
            len = data[pos++];
            len = std::min(len, size - pos);
          }
          c.in.append(reinterpret_cast<const char*>(data + pos), len);
          pos += len;
        }
      }
      for (bool progress = true; progress;) {
        progress = false;
        for (auto& [id, cs] : core.clients())
          if (!cs.dead) progress |= core.handle_frames(id);
      }
      core.remove_dead();
      check_waiters(core);
    }
    for (const auto& [id, c] : core.clients()) check_replies(c.out);
  });
  return 0;
}
