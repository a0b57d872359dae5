// The TCP store's server: one thread serves every client with poll() and moves bytes between the
// sockets and the protocol state (ServerCore, tcp_store_server_core.h), which keeps the key-value
// map and parks GET/WAIT requests until their keys are set (Note [TCP store protocol]). A peer
// that breaks the protocol or its limits loses its connection; the others are served on.
#include "tcp_store_detail.h"
#include "tcp_store_server_core.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <map>
#include <thread>

#include <kiln/core/error.h>

namespace kiln::dist::tcp {
namespace {

constexpr size_t kReadChunk = 64 * 1024;

}  // namespace

struct Server::State {
  std::string where;
  Fd listener, wake_read, wake_write;
  std::thread thread;
  ServerCore core;
  std::map<uint64_t, Fd> sockets;  // by client id

  void run();
  void accept_clients();
  void read_from(Fd& fd, ClientState& c);
  bool write_to(Fd& fd, ClientState& c);
};

Server::Server(const std::string& host, uint16_t port) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.where = host + ":" + std::to_string(port);
  const sockaddr_in addr = resolve_ipv4(host, port);
  s.listener = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  KILN_CHECK_DIST(s.listener.valid(), "TCP store: socket() failed for server at ", s.where, ": ", errno_text(errno));
  int one = 1;
  ::setsockopt(s.listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  KILN_CHECK_DIST(::bind(s.listener.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0,
                  "TCP store: cannot bind the server to ", s.where, ": ", errno_text(errno));
  KILN_CHECK_DIST(::listen(s.listener.get(), 1024) == 0, "TCP store: listen() failed on ", s.where, ": ",
                  errno_text(errno));
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
    fds.push_back({listener.get(), POLLIN, 0});
    for (auto& [id, c] : clients) {
      // A full input buffer always holds a complete frame, handled once the reply backlog
      // drains: until then neither reading nor a hang-up is reported (no busy loop).
      short events = 0;
      if (c.out.size() <= kOutHighWater && c.in.size() < kMaxFrameBytes) events |= POLLIN | POLLRDHUP;
      if (!c.out.empty()) events |= POLLOUT;
      fds.push_back({sockets.at(id).get(), events, 0});
      ids.push_back(id);
    }
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      KILN_FAIL_DIST("poll() failed: ", errno_text(errno));
    }
    if (fds[0].revents) return;  // stop requested
    if (fds[1].revents & POLLIN) accept_clients();
    for (size_t i = 0; i < ids.size(); ++i) {
      const short ev = fds[i + 2].revents;
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
    for (uint64_t id : core.remove_dead()) sockets.erase(id);
  }
}

void Server::State::accept_clients() {
  for (;;) {
    const int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
        std::fprintf(stderr, "kiln: TCP store server at %s: accept() failed: %s\n", where.c_str(),
                     errno_text(errno).c_str());
      return;
    }
    set_nodelay(fd);
    sockets.emplace(core.add_client(), Fd(fd));
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
