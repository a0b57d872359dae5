// Private to the TCP store: the server's protocol state without sockets (Note [TCP store
// protocol]): each client's input and reply buffers, the key-value map and the parked GET/WAIT
// requests. The socket server (tcp_store_server.cpp) feeds it the bytes it receives and sends the
// replies it queues; fuzz/fuzz_store_protocol.cpp drives it directly with hostile byte streams.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "tcp_store_detail.h"

namespace kiln::dist::tcp {

inline constexpr size_t kOutHighWater = 1 << 20;  // stop taking requests from a peer that does not read
inline constexpr size_t kMaxFrameBytes = 5 + 2 * 8 + kMaxKeyBytes + kMaxValueBytes;

struct ClientState {
  std::string in;          // received bytes not yet handled (at most one incomplete frame past the handled ones)
  std::string out;         // encoded replies not yet sent
  bool dead = false;       // broke the protocol, or its connection is gone: dropped by remove_dead
  bool parked = false;     // a GET or WAIT is waiting for keys
  Frame waiting;           // the parked request
  std::string parked_on;   // its first missing key, where it is listed in `waiters_`
};

class ServerCore {
 public:
  uint64_t add_client();
  std::map<uint64_t, ClientState>& clients() { return clients_; }
  // Handles the complete frames buffered for client `id` while its reply backlog is below the
  // high-water mark; a malformed or out-of-limits frame marks it dead. True when any was handled.
  bool handle_frames(uint64_t id);
  // Forgets the dead clients (and their parked requests); returns their ids.
  std::vector<uint64_t> remove_dead();

  const std::unordered_map<std::string, std::string>& data() const { return data_; }
  // Parked client ids listed under missing keys (for the fuzzer's invariant checks).
  const std::unordered_map<std::string, std::vector<uint64_t>>& waiters() const { return waiters_; }

 private:
  void handle(uint64_t id, ClientState& c, Frame& req);
  bool try_answer(uint64_t id, ClientState& c);
  void notify(const std::string& key);
  void unpark(uint64_t id, ClientState& c);
  void reply(ClientState& c, uint8_t tag, std::vector<std::string> items = {}) {
    encode_frame(Frame{tag, std::move(items)}, c.out);
  }

  std::unordered_map<std::string, std::string> data_;
  std::map<uint64_t, ClientState> clients_;
  std::unordered_map<std::string, std::vector<uint64_t>> waiters_;  // parked client ids by key
  uint64_t next_id_ = 0;
};

}  // namespace kiln::dist::tcp
