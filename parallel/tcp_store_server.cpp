// The TCP store's server: one thread serves every client with poll() and moves bytes between the
// sockets and the protocol state (ServerCore, tcp_store_server_core.h), which keeps the key-value
// map and parks GET/WAIT requests until their keys are set (Note [TCP store protocol]). A peer
// that breaks the protocol or its limits loses its connection; the others are served on. A refused
// peer (wrong token, over the connection limit, no HELLO in time) gets its ERROR reply, then a
// half-close, and is closed when it hangs up or after a grace period (Note [Refusing a peer]).
#include "tcp_store_detail.h"
#include "tcp_store_server_core.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <netinet/in.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include <kiln/core/error.h>

namespace kiln::dist::tcp {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kReadChunk = 64 * 1024;
constexpr auto kHelloWithin = std::chrono::seconds(10);  // a token-protected server's wait for HELLO
constexpr auto kLingerFor = std::chrono::seconds(2);
constexpr size_t kMaxLingering = 256;

// Note [Refusing a peer]
// Closing a socket whose peer's bytes are still unread sends a reset, and a reset can overtake
// the ERROR reply queued before it: the peer would see "connection reset" instead of the reason.
// So a refused peer's reply is flushed, its sending side shut down, and the socket kept (reading
// and discarding) until the peer closes or kLingerFor passes; at most kMaxLingering at a time,
// so a flood cannot make the server hold sockets without bound.

// A listening socket on one address; throws naming the address and the errno text.
Fd listen_on(const Address& addr, const std::string& where) {
  Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  KILN_CHECK_DIST(fd.valid(), "TCP store: socket() failed for the server at ", where, ": ", errno_text(errno));
  int one = 1, zero = 0;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (addr.family() == AF_INET6) {  // "::" also takes IPv4 (dual stack); a literal is one address anyway
    const auto* a6 = reinterpret_cast<const sockaddr_in6*>(addr.get());
    const bool any = IN6_IS_ADDR_UNSPECIFIED(&a6->sin6_addr);
    ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, any ? &zero : &one, sizeof one);
  }
  KILN_CHECK_DIST(::bind(fd.get(), addr.get(), addr.len) == 0, "TCP store: cannot bind the server to ", where, ": ",
                  errno_text(errno));
  KILN_CHECK_DIST(::listen(fd.get(), 1024) == 0, "TCP store: listen() failed on ", where, ": ", errno_text(errno));
  return fd;
}

Address any_address(int family, uint16_t port) {
  Address a;
  if (family == AF_INET6) {
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
    a6->sin6_family = AF_INET6;
    a6->sin6_addr = in6addr_any;
    a6->sin6_port = htons(port);
    a.len = sizeof(sockaddr_in6);
  } else {
    auto* a4 = reinterpret_cast<sockaddr_in*>(&a.storage);
    a4->sin_family = AF_INET;
    a4->sin_addr.s_addr = htonl(INADDR_ANY);
    a4->sin_port = htons(port);
    a.len = sizeof(sockaddr_in);
  }
  return a;
}

}  // namespace

struct Server::State {
  explicit State(ServerConfig config) : core(std::move(config)) {}
  std::string where;
  Fd listener, wake_read, wake_write;
  std::thread thread;
  ServerCore core;
  std::map<uint64_t, Fd> sockets;                  // by client id
  std::map<uint64_t, Clock::time_point> hello_by;  // clients that owe a HELLO (token set)
  std::vector<std::pair<Fd, Clock::time_point>> lingering;  // refused peers (Note [Refusing a peer])
  Clock::time_point accept_paused_until{};

  void run();
  void accept_clients();
  void read_from(Fd& fd, ClientState& c);
  bool write_to(Fd& fd, ClientState& c);
  void linger(Fd fd);
  void serve_lingering(const std::vector<pollfd>& fds, size_t first);
  int poll_timeout_ms() const;
};

Server::Server(const std::string& bind_host, uint16_t port, ServerConfig config)
    : state_(std::make_unique<State>(std::move(config))) {
  State& s = *state_;
  s.where = host_port(is_any_address(bind_host) ? "*" : bind_host, port);
  if (is_any_address(bind_host)) {
    // Every interface: IPv6's "::" with IPv4 mapped in where the system has IPv6, else 0.0.0.0.
    if (bind_host != "0.0.0.0") {
      try {
        s.listener = listen_on(any_address(AF_INET6, port), s.where);
      } catch (const std::exception&) {  // no IPv6 here: IPv4 alone (its error, if any, is the one shown)
      }
    }
    if (!s.listener.valid()) s.listener = listen_on(any_address(AF_INET, port), s.where);
  } else {
    const std::vector<Address> addrs = resolve(bind_host, port);
    s.listener = listen_on(addrs.front(), s.where);
  }
  set_nonblocking(s.listener.get(), true);
  int pipe_fds[2];
  KILN_CHECK_DIST(::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) == 0, "TCP store: pipe() failed: ", errno_text(errno));
  s.wake_read = Fd(pipe_fds[0]);
  s.wake_write = Fd(pipe_fds[1]);
  s.thread = std::thread([&s] {
    try {
      s.run();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln: TCP store server at %s stopped: %s\n", s.where.c_str(), e.what());
    }
  });
}

Server::~Server() {
  State& s = *state_;
  const char byte = 1;
  if (::write(s.wake_write.get(), &byte, 1) != 1)
    std::fprintf(stderr, "kiln: cannot wake the TCP store server at %s to stop it: %s\n", s.where.c_str(),
                 errno_text(errno).c_str());
  if (s.thread.joinable()) s.thread.join();
}

void Server::State::run() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  auto& clients = core.clients();
  for (;;) {
    fds.clear();
    ids.clear();
    fds.push_back({wake_read.get(), POLLIN, 0});
    // Out of file descriptors: stop listening for a moment instead of spinning on accept().
    fds.push_back({listener.get(), short(Clock::now() < accept_paused_until ? 0 : POLLIN), 0});
    const size_t first_lingering = fds.size();
    for (const auto& [fd, until] : lingering) fds.push_back({fd.get(), POLLIN | POLLRDHUP, 0});
    for (auto& [id, c] : clients) {
      // A full input buffer always holds a complete frame, handled once the reply backlog
      // drains: until then neither reading nor a hang-up is reported (no busy loop).
      short events = 0;
      if (c.out.size() <= kOutHighWater && c.in.size() < kMaxFrameBytes) events |= POLLIN | POLLRDHUP;
      if (!c.out.empty()) events |= POLLOUT;
      fds.push_back({sockets.at(id).get(), events, 0});
      ids.push_back(id);
    }
    if (::poll(fds.data(), fds.size(), poll_timeout_ms()) < 0) {
      if (errno == EINTR) continue;
      KILN_FAIL_DIST("poll() failed: ", errno_text(errno));
    }
    if (fds[0].revents) return;  // stop requested
    serve_lingering(fds, first_lingering);
    const size_t first_client = fds.size() - ids.size();
    if (fds[1].revents & POLLIN) accept_clients();
    for (size_t i = 0; i < ids.size(); ++i) {
      const short ev = fds[first_client + i].revents;
      if (ev & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) read_from(sockets.at(ids[i]), clients.at(ids[i]));
    }
    // A frame may unpark another client, and a flushed reply lets a client's buffered frames
    // run: repeat until nothing moves.
    for (bool progress = true; progress;) {
      progress = false;
      for (auto& [id, c] : clients)
        if (!c.dead) progress |= core.handle_frames(id);
      for (auto& [id, c] : clients)
        if (!c.dead) progress |= write_to(sockets.at(id), c);
    }
    const auto now = Clock::now();
    for (auto it = hello_by.begin(); it != hello_by.end();) {
      auto c = clients.find(it->first);
      if (c == clients.end() || c->second.authed || c->second.dead || c->second.closing) {
        it = hello_by.erase(it);
      } else if (now >= it->second) {
        core.refuse(it->first, "no HELLO with the store token within 10 s");
        write_to(sockets.at(it->first), c->second);
        it = hello_by.erase(it);
      } else {
        ++it;
      }
    }
    // A refused client whose ERROR reply is out: half-close it and let it linger.
    for (auto& [id, c] : clients)
      if (c.closing && !c.dead && c.out.empty()) {
        c.dead = true;
        linger(std::move(sockets.at(id)));
      }
    for (uint64_t id : core.remove_dead()) sockets.erase(id);
  }
}

int Server::State::poll_timeout_ms() const {
  if (Clock::now() < accept_paused_until) return 100;
  if (lingering.empty() && hello_by.empty()) return -1;
  return 250;  // deadlines are coarse: a refused peer goes a little after its time
}

void Server::State::linger(Fd fd) {
  if (!fd.valid()) return;
  ::shutdown(fd.get(), SHUT_WR);
  if (lingering.size() >= kMaxLingering) return;  // closed at once (Note [Refusing a peer])
  lingering.emplace_back(std::move(fd), Clock::now() + kLingerFor);
}

void Server::State::serve_lingering(const std::vector<pollfd>& fds, size_t first) {
  const auto now = Clock::now();
  std::vector<std::pair<Fd, Clock::time_point>> kept;
  for (size_t i = 0; i < lingering.size(); ++i) {
    auto& [fd, until] = lingering[i];
    bool gone = now >= until;
    if (!gone && first + i < fds.size() && fds[first + i].revents) {
      char buf[4096];
      for (;;) {
        const ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
        if (n > 0) continue;
        if (n < 0 && errno == EINTR) continue;
        gone = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
        break;
      }
    }
    if (!gone) kept.emplace_back(std::move(fd), until);
  }
  lingering = std::move(kept);
}

void Server::State::accept_clients() {
  for (;;) {
    const int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) {
        if (Clock::now() >= accept_paused_until)
          std::fprintf(stderr, "kiln: TCP store server at %s: out of file descriptors; not accepting for 100 ms\n",
                       where.c_str());
        accept_paused_until = Clock::now() + std::chrono::milliseconds(100);
        return;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
        std::fprintf(stderr, "kiln: TCP store server at %s: accept() failed: %s\n", where.c_str(),
                     errno_text(errno).c_str());
      return;
    }
    set_nodelay(fd);
    const bool full = core.open_clients() >= core.config().max_connections;
    const uint64_t id = core.add_client();
    sockets.emplace(id, Fd(fd));
    if (full) {
      core.refuse(id, "too many connections: the store serves at most " +
                          std::to_string(core.config().max_connections) + " at a time");
    } else if (!core.config().token.empty()) {
      hello_by.emplace(id, Clock::now() + kHelloWithin);
    } else {
      core.clients().at(id).authed = true;
    }
  }
}

void Server::State::read_from(Fd& fd, ClientState& c) {
  char buf[kReadChunk];
  while (c.in.size() < kMaxFrameBytes) {
    const ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n > 0) {
      c.in.append(buf, size_t(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n < 0 && errno == EINTR) continue;
    c.dead = true;  // closed by the peer, or a socket error
    return;
  }
}

// Sends what the socket takes; true when any bytes went out.
bool Server::State::write_to(Fd& fd, ClientState& c) {
  bool wrote = false;
  while (!c.out.empty()) {
    const ssize_t n = ::send(fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n > 0) {
      c.out.erase(0, size_t(n));
      wrote = true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) c.dead = true;
    break;
  }
  return wrote;
}

}  // namespace kiln::dist::tcp
