// Private to the TCP store (tcp_store*.cpp): the wire format shared by server and client, bounded
// frame parsing, and small POSIX socket helpers. See Note [TCP store protocol].
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::dist::tcp {

// Note [TCP store protocol]
// Every message, in both directions, is one frame: a u8 tag, a u32 item count, then for each item
// a u64 length and that many bytes (integers little-endian). Requests: SET(key, value), GET(key),
// ADD(key, 8-byte i64 delta), CHECK(key), WAIT(key...), CANCEL(), HELLO(token). Replies: OK(result items),
// CANCELLED(missing keys), ERROR(message). A GET or WAIT whose keys are missing is parked on the
// server and answered when they are set; a client that times out sends CANCEL and reads until the
// CANCELLED reply, so the stream stays in step. Limits are checked as soon as a length arrives,
// before anything is allocated: a frame that breaks them closes that connection.
// A client opens with HELLO carrying the shared token (KILN_STORE_TOKEN, may be empty). A server
// with a token answers anything else, or a wrong token, with ERROR and closes the connection once
// the reply is sent; so does a server over its connection limit. A server without a token also
// takes requests without a HELLO. The server's own limits (value size, total stored bytes) are
// ERROR replies: the request fails, the connection and the store stay usable.
inline constexpr size_t kMaxKeyBytes = 4 * 1024;
inline constexpr size_t kMaxValueBytes = 64u * 1024 * 1024;
inline constexpr uint32_t kMaxKeys = 1024;

enum Tag : uint8_t {
  kSet = 1, kGet = 2, kAdd = 3, kCheck = 4, kWait = 5, kCancel = 6, kHello = 7,
  kOk = 0x80, kCancelled = 0x81, kError = 0x82,
};

struct Frame {
  uint8_t tag = 0;
  std::vector<std::string> items;
};

enum class Parse { incomplete, bad, done };

// Parses one frame from the front of [data, data + n). On `done`, *consumed is its size.
Parse parse_frame(const char* data, size_t n, Frame& out, size_t& consumed);
// Appends the encoded frame to `out`.
void encode_frame(const Frame& frame, std::string& out);

std::string encode_i64(int64_t v);
int64_t decode_i64(const std::string& bytes);  // bytes.size() == 8

// Owns a file descriptor; closes it on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { int f = fd_; fd_ = -1; return f; }
  void reset();

 private:
  int fd_ = -1;
};

// One socket address (IPv4 or IPv6).
struct Address {
  sockaddr_storage storage{};
  socklen_t len = 0;
  int family() const { return storage.ss_family; }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

// The addresses of host:port: a dotted quad, an IPv6 literal (brackets allowed) or a name, in
// getaddrinfo's order; throws kiln::Error naming the host when there is none.
std::vector<Address> resolve(const std::string& host, uint16_t port);
// "host:port", with brackets around an IPv6 literal.
std::string host_port(const std::string& host, uint16_t port);
// Whether `host` names "every interface": empty, "*", "0.0.0.0" or "::".
bool is_any_address(const std::string& host);
std::string errno_text(int err);
void set_nonblocking(int fd, bool on);
void set_nodelay(int fd);

// What the server enforces (TCPStoreOptions in store.h documents each).
struct ServerConfig {
  std::string token;
  size_t max_connections = 1024;
  size_t max_value_bytes = kMaxValueBytes;
  size_t max_total_bytes = size_t(1) << 30;
};

// The server: binds and listens in the constructor (errors throw there), serves every client
// from one background thread with poll(), stops and joins in the destructor. `bind_host` is an
// address, a name, or every interface (is_any_address: IPv6 and IPv4 both where the system can).
class Server {
 public:
  Server(const std::string& bind_host, uint16_t port, ServerConfig config);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace kiln::dist::tcp
