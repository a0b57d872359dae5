// Store: the key-value rendezvous every rank reaches (set/get/add/wait with a timeout), like
// c10d's Store. TCPStore is served by rank 0 at MASTER_ADDR:MASTER_PORT.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::dist {

using Bytes = std::vector<uint8_t>;
using Millis = std::chrono::milliseconds;

inline constexpr Millis kDefaultTimeout = std::chrono::minutes(5);

/// A key-value store every rank reaches: set, get, add, wait, with a timeout (c10d's Store).
class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const Bytes& value) = 0;  ///< stores (or overwrites) key
  /// Blocks until the key exists (or the timeout passes: kiln::Error naming the key).
  virtual Bytes get(const std::string& key) = 0;
  /// Atomically adds `delta` to the integer stored at key (0 when absent); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  /// Blocks until every key exists; fails naming the missing keys after `timeout`.
  virtual void wait(const std::vector<std::string>& keys, Millis timeout) = 0;
  /// True when the key exists now (no waiting).
  virtual bool check(const std::string& key) = 0;

  void set_timeout(Millis timeout) { timeout_ = timeout; }  ///< get()'s wait
  Millis timeout() const { return timeout_; }  ///< get()'s wait

  void set(const std::string& key, const std::string& value) { set(key, Bytes(value.begin(), value.end())); }  ///< a string value
  std::string get_string(const std::string& key) {
    Bytes b = get(key);
    return std::string(b.begin(), b.end());
  }

 protected:
  Millis timeout_ = kDefaultTimeout;
};

/// Options of TCPStore: where it is served, whether this process serves it, the timeout, the
/// server's bind address and the shared token.
struct TCPStoreOptions {
  std::string host_ = "127.0.0.1";  ///< where clients connect: IPv4, IPv6 (brackets optional) or a name
  uint16_t port_ = 29500;
  bool is_server_ = false;  ///< rank 0 (or kiln-run's agent) serves; it also connects as a client
  Millis timeout_ = kDefaultTimeout;
  /// The server's listening address: empty binds `host` (what it resolves to, first address);
  /// "*", "::" or "0.0.0.0" bind every interface ("*" and "::" IPv6 and IPv4 where possible).
  std::string bind_;
  /// Shared secret every client presents; empty: KILN_STORE_TOKEN from the environment (empty
  /// there too: no token). A server with a token refuses clients without it, and a client told
  /// "wrong token" fails at once with that message (Note [TCP store protocol] in parallel/tcp_store_detail.h,
  /// in the source tree).
  std::string token_;
  /// Server limits, each refused with an error naming it while the others are served on.
  size_t max_connections_ = 1024;           ///< open client connections
  size_t max_value_bytes_ = 64u << 20;      ///< one value (the protocol's own cap is 64 MiB)
  size_t max_total_bytes_ = size_t(1) << 30;  ///< keys plus values held
  TCPStoreOptions& host(std::string h) { host_ = std::move(h); return *this; }
  TCPStoreOptions& port(uint16_t p) { port_ = p; return *this; }
  TCPStoreOptions& is_server(bool v) { is_server_ = v; return *this; }
  TCPStoreOptions& timeout(Millis t) { timeout_ = t; return *this; }
  TCPStoreOptions& bind(std::string b) { bind_ = std::move(b); return *this; }
  TCPStoreOptions& token(std::string t) { token_ = std::move(t); return *this; }
  TCPStoreOptions& max_connections(size_t n) { max_connections_ = n; return *this; }
  TCPStoreOptions& max_value_bytes(size_t n) { max_value_bytes_ = n; return *this; }
  TCPStoreOptions& max_total_bytes(size_t n) { max_total_bytes_ = n; return *this; }
};

/// Makes the TCP store: the server (when is_server) listens on `bind` (default: `host`), and every
/// process connects to it as a client, retrying until the timeout while nothing listens yet.
std::shared_ptr<Store> make_tcp_store(const TCPStoreOptions& options);

/// Only the server side (no client connection), e.g. kiln-run's agent hosting the rendezvous for
/// workers that may all die: the store lives until the returned handle is destroyed.
std::shared_ptr<void> serve_tcp_store(const TCPStoreOptions& options);

/// Keys under a prefix ("<prefix>/<key>"), so several groups can share one store.
std::shared_ptr<Store> make_prefix_store(std::string prefix, std::shared_ptr<Store> store);

}  // namespace kiln::dist
