// TCPStore: the client every process uses (rank 0 too) plus, on the serving rank, the server
// thread (tcp_store_server.cpp). One connection per store, guarded by a mutex; timeouts are the
// client's, and a timed-out GET/WAIT is cancelled on the server (Note [TCP store protocol]).
#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <kiln/core/error.h>
#include <kiln/parallel/store.h>

#include "tcp_store_detail.h"

namespace kiln::dist {
namespace {

using Clock = std::chrono::steady_clock;
using tcp::Fd;
using tcp::Frame;

std::string join_keys(const std::vector<std::string>& keys) {
  std::string s = "[";
  for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", \"" : "\"") + keys[i] + "\"";
  return s + "]";
}

// Now + t, with t capped at a year so Millis::max() does not overflow the clock.
Clock::time_point deadline_after(Millis t) {
  return Clock::now() + std::min<Millis>(t, std::chrono::hours(24 * 365));
}

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : int(std::min<int64_t>(left, 1 << 30));
}

}  // namespace

std::unique_ptr<tcp::Server> make_server(const TCPStoreOptions& o);

namespace {

class TcpStore final : public Store {
 public:
  explicit TcpStore(const TCPStoreOptions& o)
      : host_(o.host_), port_(o.port_), where_(tcp::host_port(o.host_, o.port_)), token_(token_of(o)) {
    timeout_ = o.timeout_;
    KILN_CHECK(o.timeout_.count() > 0, "TCP store: the timeout must be positive, got ", o.timeout_.count(), " ms");
    if (o.is_server_) server_ = make_server(o);
    std::lock_guard lock(mu_);
    connect(deadline_after(timeout_));
  }

  void set(const std::string& key, const Bytes& value) override {
    check_key(key);
    KILN_CHECK(value.size() <= tcp::kMaxValueBytes, "TCP store: set(\"", key, "\") value of ", value.size(),
               " bytes exceeds the limit of ", tcp::kMaxValueBytes, " bytes");
    std::lock_guard lock(mu_);
    request({tcp::kSet, {key, std::string(value.begin(), value.end())}}, "set(\"" + key + "\")");
  }

  Bytes get(const std::string& key) override {
    check_key(key);
    std::lock_guard lock(mu_);
    Frame r = blocking_request({tcp::kGet, {key}}, timeout_, "get(\"" + key + "\")");
    KILN_CHECK_DIST(r.items.size() == 1, "TCP store at ", where_, ": malformed reply to get(\"", key, "\")");
    return Bytes(r.items[0].begin(), r.items[0].end());
  }

  int64_t add(const std::string& key, int64_t delta) override {
    check_key(key);
    std::lock_guard lock(mu_);
    Frame r = request({tcp::kAdd, {key, tcp::encode_i64(delta)}}, "add(\"" + key + "\")");
    KILN_CHECK_DIST(r.items.size() == 1 && r.items[0].size() == 8, "TCP store at ", where_,
                    ": malformed reply to add(\"", key, "\")");
    return tcp::decode_i64(r.items[0]);
  }

  void wait(const std::vector<std::string>& keys, Millis timeout) override {
    if (keys.empty()) return;
    KILN_CHECK(keys.size() <= tcp::kMaxKeys, "TCP store: wait() on ", keys.size(), " keys exceeds the limit of ",
               tcp::kMaxKeys);
    for (const std::string& k : keys) check_key(k);
    std::lock_guard lock(mu_);
    blocking_request({tcp::kWait, keys}, timeout, "wait(" + join_keys(keys) + ")");
  }

  bool check(const std::string& key) override {
    check_key(key);
    std::lock_guard lock(mu_);
    Frame r = request({tcp::kCheck, {key}}, "check(\"" + key + "\")");
    KILN_CHECK_DIST(r.items.size() == 1 && r.items[0].size() == 1, "TCP store at ", where_,
                    ": malformed reply to check(\"", key, "\")");
    return r.items[0][0] != 0;
  }

 private:
  static void check_key(const std::string& key) {
    KILN_CHECK(key.size() <= tcp::kMaxKeyBytes, "TCP store: a key of ", key.size(),
               " bytes exceeds the limit of ", tcp::kMaxKeyBytes, " bytes");
  }

  // Connects, retrying while nothing listens yet (the server may start later), until `deadline`,
  // then presents the token (HELLO); a refusal fails at once with the server's reason.
  void connect(Clock::time_point deadline) {
    const std::vector<tcp::Address> addrs = tcp::resolve(host_, port_);
    std::string last_error = "timed out";
    for (size_t attempt = 0;; ++attempt) {
      const tcp::Address& addr = addrs[attempt % addrs.size()];
      Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
      KILN_CHECK_DIST(fd.valid(), "TCP store: socket() failed: ", tcp::errno_text(errno));
      tcp::set_nonblocking(fd.get(), true);
      int rc = ::connect(fd.get(), addr.get(), addr.len);
      int err = rc == 0 ? 0 : errno;
      if (err == EINPROGRESS) {
        pollfd p{fd.get(), POLLOUT, 0};
        if (::poll(&p, 1, remaining_ms(deadline)) == 1) {
          socklen_t len = sizeof err;
          ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        } else {
          err = ETIMEDOUT;
        }
      }
      if (err == 0) {
        tcp::set_nonblocking(fd.get(), false);
        tcp::set_nodelay(fd.get());
        fd_ = std::move(fd);
        hello(deadline);
        return;
      }
      last_error = tcp::errno_text(err);
      const auto now = Clock::now();
      KILN_CHECK_DIST(now < deadline, "TCP store: could not connect to ", where_, " within ", timeout_.count(),
                      " ms (last error: ", last_error, ")");
      std::this_thread::sleep_for(std::min<Clock::duration>(Millis(50), deadline - now));
    }
  }

  void hello(Clock::time_point deadline) {
    const std::string what = "connect";
    send_frame({tcp::kHello, {token_}}, what);
    Frame r;
    if (!recv_frame(r, std::max(deadline, deadline_after(Millis(10000))), what))
      fail(what, "the server did not answer the handshake");
    if (r.tag == tcp::kError) fail(what, "refused: " + (r.items.empty() ? std::string("no reason given") : r.items[0]));
    if (r.tag != tcp::kOk) fail(what, "unexpected reply to the handshake (is this a Kiln store?)");
  }

  static std::string token_of(const TCPStoreOptions& o) {
    if (!o.token_.empty()) return o.token_;
    const char* env = std::getenv("KILN_STORE_TOKEN");
    return env ? std::string(env) : std::string();
  }

  void send_frame(const Frame& f, const std::string& what) {
    std::string bytes;
    tcp::encode_frame(f, bytes);
    size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = ::send(fd_.get(), bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail(what, "send failed: " + tcp::errno_text(errno));
      off += size_t(n);
    }
  }

  // Reads one frame; false when `deadline` passes first.
  bool recv_frame(Frame& out, Clock::time_point deadline, const std::string& what) {
    for (;;) {
      size_t used = 0;
      const tcp::Parse p = tcp::parse_frame(in_.data(), in_.size(), out, used);
      if (p == tcp::Parse::done) {
        in_.erase(0, used);
        return true;
      }
      if (p == tcp::Parse::bad) fail(what, "malformed reply from the server");
      pollfd pfd{fd_.get(), POLLIN, 0};
      const int rc = ::poll(&pfd, 1, remaining_ms(deadline));
      if (rc < 0 && errno == EINTR) continue;
      if (rc == 0) return false;
      char buf[64 * 1024];
      const ssize_t n = ::recv(fd_.get(), buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) fail(what, "the server closed the connection (is the process hosting the store still alive?)");
      if (n < 0) fail(what, "recv failed: " + tcp::errno_text(errno));
      in_.append(buf, size_t(n));
    }
  }

  // Drops the connection (the next call reconnects) and throws.
  [[noreturn]] void fail(const std::string& what, const std::string& why) {
    fd_.reset();
    in_.clear();
    KILN_FAIL_DIST("TCP store at ", where_, ": ", what, ": ", why);
    __builtin_unreachable();
  }

  Frame checked_reply(Frame r, const std::string& what) {
    if (r.tag == tcp::kError) fail(what, r.items.empty() ? "server error" : r.items[0]);
    if (r.tag != tcp::kOk) fail(what, "unexpected reply from the server");
    return r;
  }

  // A request the server answers at once.
  Frame request(const Frame& req, const std::string& what) {
    if (!fd_.valid()) connect(deadline_after(timeout_));
    send_frame(req, what);
    Frame r;
    if (!recv_frame(r, deadline_after(timeout_), what))
      fail(what, "no reply within " + std::to_string(timeout_.count()) + " ms");
    return checked_reply(std::move(r), what);
  }

  // A GET/WAIT the server parks until its keys exist; cancelled on the server after `timeout`.
  Frame blocking_request(const Frame& req, Millis timeout, const std::string& what) {
    if (!fd_.valid()) connect(deadline_after(timeout_));
    send_frame(req, what);
    Frame r;
    if (recv_frame(r, deadline_after(timeout), what)) return checked_reply(std::move(r), what);
    const std::string timed_out = "timed out after " + std::to_string(timeout.count()) + " ms";
    send_frame({tcp::kCancel, {}}, what);
    const auto grace = deadline_after(std::min<Millis>(timeout_, Millis(10000)));
    if (!recv_frame(r, grace, what)) fail(what, timed_out + "; the server did not answer the cancel");
    if (r.tag == tcp::kCancelled) fail(what, timed_out + " waiting for " + join_keys(r.items));
    // The answer crossed the cancel on the wire: take it, and read the (empty) cancel reply.
    Frame ack;
    if (!recv_frame(ack, grace, what) || ack.tag != tcp::kCancelled)
      fail(what, "no reply to the cancel after a late answer");
    return checked_reply(std::move(r), what);
  }

  std::string host_;
  uint16_t port_;
  std::string where_;
  std::string token_;
  std::unique_ptr<tcp::Server> server_;  // declared before the connection: destroyed after it
  std::mutex mu_;
  Fd fd_;
  std::string in_;  // received bytes not yet parsed
};

}  // namespace

std::unique_ptr<tcp::Server> make_server(const TCPStoreOptions& o) {
  KILN_CHECK(o.max_connections_ >= 1, "TCP store: max_connections must be at least 1");
  KILN_CHECK(o.max_value_bytes_ <= tcp::kMaxValueBytes, "TCP store: max_value_bytes ", o.max_value_bytes_,
             " exceeds the protocol's limit of ", tcp::kMaxValueBytes);
  tcp::ServerConfig config;
  config.token = o.token_;
  if (config.token.empty())
    if (const char* env = std::getenv("KILN_STORE_TOKEN")) config.token = env;
  config.max_connections = o.max_connections_;
  config.max_value_bytes = o.max_value_bytes_;
  config.max_total_bytes = o.max_total_bytes_;
  return std::make_unique<tcp::Server>(o.bind_.empty() ? o.host_ : o.bind_, o.port_, std::move(config));
}

std::shared_ptr<Store> make_tcp_store(const TCPStoreOptions& options) {
  return std::make_shared<TcpStore>(options);
}

std::shared_ptr<void> serve_tcp_store(const TCPStoreOptions& options) {
  return std::shared_ptr<tcp::Server>(make_server(options));
}

}  // namespace kiln::dist
