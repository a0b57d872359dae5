// Private to the TCP store: the server's protocol state without sockets (Note [TCP store
// protocol]): each client's input and reply buffers, the key-value map and the parked GET/WAIT
// requests. The socket server (tcp_store_server.cpp) feeds it the bytes it receives and sends the
// replies it queues; fuzz/fuzz_store_protocol.cpp drives it directly with hostile byte streams.
// It also enforces the token and the value-size and total-bytes limits (ServerConfig).
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
  bool authed = false;     // sent a HELLO with the right token (or the server has none)
  bool closing = false;    // refused: its ERROR reply is sent, then the server closes it
};

class ServerCore {
 public:
  explicit ServerCore(ServerConfig config = {}) : config_(std::move(config)) {}
  uint64_t add_client();
  // Queues an ERROR reply with `why` and marks the client closing: nothing more it sends is handled.
  void refuse(uint64_t id, const std::string& why);
  // Clients not dead or closing (what the connection limit counts).
  size_t open_clients() const;
  // Key and value bytes stored now (what max_total_bytes limits).
  size_t stored_bytes() const { return stored_bytes_; }
  const ServerConfig& config() const { return config_; }
  std::map<uint64_t, ClientState>& clients() { return clients_; }
  // Handles the complete frames buffered for client `id` while its reply backlog is below the
  // high-water mark; a malformed or out-of-limits frame marks it dead. True when any was handled.
  // A closing client's frames are dropped unhandled.
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
  // Stores key = value when the limits allow; otherwise replies ERROR naming the limit. True when stored.
  bool store(ClientState& c, const std::string& key, std::string value);

  ServerConfig config_;
  size_t stored_bytes_ = 0;
  std::unordered_map<std::string, std::string> data_;
  std::map<uint64_t, ClientState> clients_;
  std::unordered_map<std::string, std::vector<uint64_t>> waiters_;  // parked client ids by key
  uint64_t next_id_ = 0;
};

}  // namespace kiln::dist::tcp
