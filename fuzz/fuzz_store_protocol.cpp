// Fuzzes the TCP store server's protocol handling (parallel/tcp_store_server_core.h) as the server
// sees it: up to four clients whose byte streams, disconnects and reads interleave as the input
// says. An input starting with the byte 0xA5 runs a server with the token "fuzz-token", small
// value and total-byte limits and at most 3 connections (the byte is then skipped); any other
// input a server without them. The input is a script of operations; each starts with one byte `op`:
//   op & 3         the client slot (a slot whose client was dropped connects a new one)
//   (op >> 2) & 3  0 or 3: the next byte is a length L, the L bytes after it arrive from that client
//                  1: the client disconnects   2: the client reads (drains) its replies
// After each operation the server handles every complete frame, as its poll loop does. Checked:
// every reply the server queues is a well-formed frame with a reply tag, each parked client is
// listed exactly once, under the key it waits for, a refused client gets nothing handled, the
// stored bytes stay within the limit and match the map, and under a token only an authenticated
// client changes the map.
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

void check_limits(ServerCore& core) {
  size_t bytes = 0;
  for (const auto& [k, v] : core.data()) {
    bytes += k.size() + v.size();
    kiln::fuzz::check(v.size() <= core.config().max_value_bytes, "a value over the limit was stored");
  }
  kiln::fuzz::check(bytes == core.stored_bytes(), "stored_bytes() disagrees with the map");
  kiln::fuzz::check(bytes <= core.config().max_total_bytes, "the store holds more than its limit");
  for (const auto& [id, c] : core.clients())
    kiln::fuzz::check(!c.closing || (c.in.empty() && !c.parked), "a refused client still has requests handled");
}

ServerConfig config_for(const uint8_t* data, size_t size, size_t& pos) {
  ServerConfig config;
  if (size > 0 && data[0] == 0xA5) {
    config.token = "fuzz-token";
    config.max_value_bytes = 40;
    config.max_total_bytes = 200;
    config.max_connections = 3;
    pos = 1;
  }
  return config;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::run_reader([&] {
    size_t pos = 0;
    ServerCore core(config_for(data, size, pos));
    std::map<int, uint64_t> slots;
    // A new client as the socket server admits it: refused over the connection limit, and
    // authenticated at once when there is no token.
    auto client = [&](int slot) -> ClientState& {
      auto it = slots.find(slot);
      if (it == slots.end() || !core.clients().count(it->second)) {
        const bool full = core.open_clients() >= core.config().max_connections;
        const uint64_t id = core.add_client();
        if (full) core.refuse(id, "too many connections");
        else if (core.config().token.empty()) core.clients().at(id).authed = true;
        it = slots.insert_or_assign(slot, id).first;
      }
      return core.clients().at(it->second);
    };
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
      const auto before = core.data();
      std::map<uint64_t, bool> authed_before;
      for (const auto& [id, cs] : core.clients()) authed_before[id] = cs.authed;
      for (bool progress = true; progress;) {
        progress = false;
        for (auto& [id, cs] : core.clients())
          if (!cs.dead) progress |= core.handle_frames(id);
      }
      // Only this op's client sent bytes; under a token, it changes the map only if authenticated.
      if (!core.config().token.empty() && core.data() != before) {
        const uint64_t id = slots.at(op & 3);
        kiln::fuzz::check(core.clients().count(id) && core.clients().at(id).authed,
                          "an unauthenticated client changed the store");
      }
      for (auto& [id, cs] : core.clients())
        if (cs.closing && cs.out.empty()) cs.dead = true;  // the server closes it once its reply is out
      core.remove_dead();
      check_waiters(core);
      check_limits(core);
    }
    for (const auto& [id, c] : core.clients()) check_replies(c.out);
  });
  return 0;
}
