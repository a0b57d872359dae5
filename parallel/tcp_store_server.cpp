// The TCP store's server: one thread serves every client with poll(), keeps the key-value map,
// and parks GET/WAIT requests until their keys are set (Note [TCP store protocol]). A peer that
// breaks the protocol or its limits loses its connection; the others are served on.
#include "tcp_store_detail.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <map>
#include <thread>
#include <unordered_map>

#include <kiln/core/error.h>

namespace kiln::dist::tcp {
namespace {

constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kOutHighWater = 1 << 20;  // stop taking requests from a peer that does not read
constexpr size_t kMaxFrameBytes = 5 + 2 * 8 + kMaxKeyBytes + kMaxValueBytes;

struct Client {
  Fd fd;
  std::string in, out;
  bool dead = false;
  bool parked = false;     // a GET or WAIT is waiting for keys
  Frame waiting;           // the parked request
  std::string parked_on;   // its first missing key, where it is listed in `waiters`
};

}  // namespace

struct Server::State {
  std::string where;
  Fd listener, wake_read, wake_write;
  std::thread thread;
  std::unordered_map<std::string, std::string> data;
  std::map<uint64_t, Client> clients;
  std::unordered_map<std::string, std::vector<uint64_t>> waiters;  // parked client ids by key
  uint64_t next_id = 0;

  void run();
  void accept_clients();
  void read_from(Client& c);
  bool write_to(Client& c);
  bool handle_frames(uint64_t id, Client& c);
  void handle(uint64_t id, Client& c, Frame& req);
  bool try_answer(uint64_t id, Client& c);
  void notify(const std::string& key);
  void unpark(uint64_t id, Client& c);
  void reply(Client& c, uint8_t tag, std::vector<std::string> items = {}) {
    encode_frame(Frame{tag, std::move(items)}, c.out);
  }
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
      fds.push_back({c.fd.get(), events, 0});
      ids.push_back(id);
    }
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      KILN_FAIL_DIST("poll() failed: ", errno_text(errno));
    }
    if (fds[0].revents) return;  // stop requested
    if (fds[1].revents & POLLIN) accept_clients();
    for (size_t i = 0; i < ids.size(); ++i) {
      Client& c = clients.at(ids[i]);
      const short ev = fds[i + 2].revents;
      if (ev & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) read_from(c);
    }
    // A frame may unpark another client, and a flushed reply lets a client's buffered frames
    // run: repeat until nothing moves.
    for (bool progress = true; progress;) {
      progress = false;
      for (auto& [id, c] : clients)
        if (!c.dead) progress |= handle_frames(id, c);
      for (auto& [id, c] : clients)
        if (!c.dead) progress |= write_to(c);
    }
    for (auto& [id, c] : clients)
      if (c.dead) unpark(id, c);
    std::erase_if(clients, [](const auto& kv) { return kv.second.dead; });
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
    clients[next_id++].fd = Fd(fd);
  }
}

void Server::State::read_from(Client& c) {
  char buf[kReadChunk];
  while (c.in.size() < kMaxFrameBytes) {
    const ssize_t n = ::recv(c.fd.get(), buf, sizeof buf, 0);
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
bool Server::State::write_to(Client& c) {
  bool wrote = false;
  while (!c.out.empty()) {
    const ssize_t n = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
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

// Handles the complete frames buffered for `c`; false when none could be handled.
bool Server::State::handle_frames(uint64_t id, Client& c) {
  bool progress = false;
  size_t pos = 0;
  Frame req;
  while (c.out.size() <= kOutHighWater) {
    size_t used = 0;
    const Parse p = parse_frame(c.in.data() + pos, c.in.size() - pos, req, used);
    if (p == Parse::incomplete) break;
    if (p == Parse::bad || req.tag >= kOk || (c.parked && req.tag != kCancel)) {
      c.dead = true;  // a broken or hostile peer: drop it, keep serving the others
      return progress;
    }
    pos += used;
    progress = true;
    handle(id, c, req);
  }
  c.in.erase(0, pos);
  return progress;
}

void Server::State::handle(uint64_t id, Client& c, Frame& req) {
  switch (req.tag) {
    case kSet: {
      std::string key = req.items[0];
      data[key] = std::move(req.items[1]);
      reply(c, kOk);
      notify(key);
      return;
    }
    case kAdd: {
      const std::string& key = req.items[0];
      int64_t value = 0;
      if (auto it = data.find(key); it != data.end()) {
        const std::string& s = it->second;
        auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
        if (ec != std::errc() || end != s.data() + s.size()) {
          reply(c, kError, {"add(\"" + key + "\"): the stored value is not a decimal integer"});
          return;
        }
      }
      const int64_t delta = decode_i64(req.items[1]);
      if (__builtin_add_overflow(value, delta, &value)) {
        reply(c, kError, {"add(\"" + key + "\", " + std::to_string(delta) + ") overflows int64"});
        return;
      }
      data[key] = std::to_string(value);
      reply(c, kOk, {encode_i64(value)});
      notify(key);
      return;
    }
    case kCheck:
      reply(c, kOk, {std::string(1, data.count(req.items[0]) ? '\1' : '\0')});
      return;
    case kGet:
    case kWait:
      c.parked = true;
      c.waiting = std::move(req);
      try_answer(id, c);
      return;
    case kCancel: {
      std::vector<std::string> missing;
      if (c.parked) {
        for (const std::string& k : c.waiting.items)
          if (!data.count(k)) missing.push_back(k);
        unpark(id, c);
      }
      reply(c, kCancelled, std::move(missing));
      return;
    }
    default:
      c.dead = true;
  }
}

// Answers c's parked request if all its keys exist; otherwise parks it on the first missing key.
bool Server::State::try_answer(uint64_t id, Client& c) {
  for (const std::string& k : c.waiting.items) {
    if (!data.count(k)) {
      waiters[k].push_back(id);
      c.parked_on = k;
      return false;
    }
  }
  c.parked = false;
  if (c.waiting.tag == kGet) reply(c, kOk, {data.at(c.waiting.items[0])});
  else reply(c, kOk);
  c.waiting.items.clear();
  return true;
}

void Server::State::notify(const std::string& key) {
  auto node = waiters.extract(key);
  if (node.empty()) return;
  for (uint64_t id : node.mapped()) {
    auto it = clients.find(id);
    if (it != clients.end() && it->second.parked) try_answer(id, it->second);
  }
}

// Forgets c's parked request (cancelled, or its peer is gone).
void Server::State::unpark(uint64_t id, Client& c) {
  if (!c.parked) return;
  c.parked = false;
  c.waiting.items.clear();
  if (auto it = waiters.find(c.parked_on); it != waiters.end()) {
    std::erase(it->second, id);
    if (it->second.empty()) waiters.erase(it);
  }
}

}  // namespace kiln::dist::tcp
