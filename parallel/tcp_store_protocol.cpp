// The TCP store's frame encoding and bounded parsing (Note [TCP store protocol]) and the socket
// helpers its server and client share.
#include "tcp_store_detail.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include <kiln/core/error.h>

namespace kiln::dist::tcp {
namespace {

uint64_t read_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

void write_le(uint64_t v, int bytes, std::string& out) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Largest item count a frame with this tag may carry; -1 for an unknown tag.
int64_t max_items(uint8_t tag) {
  switch (tag) {
    case kSet: case kAdd: return 2;
    case kGet: case kCheck: case kHello: return 1;
    case kWait: case kCancelled: return kMaxKeys;
    case kCancel: return 0;
    case kOk: case kError: return 1;
    default: return -1;
  }
}

int64_t min_items(uint8_t tag) {
  switch (tag) {
    case kSet: case kAdd: return 2;
    case kGet: case kCheck: case kWait: case kHello: return 1;
    default: return 0;
  }
}

// Largest length of item `i` in a frame with this tag.
uint64_t max_item_bytes(uint8_t tag, uint32_t i) {
  switch (tag) {
    case kSet: return i == 0 ? kMaxKeyBytes : kMaxValueBytes;
    case kAdd: return i == 0 ? kMaxKeyBytes : 8;
    case kOk: return kMaxValueBytes;
    default: return kMaxKeyBytes;  // keys, HELLO's token and ERROR's message
  }
}

}  // namespace

Parse parse_frame(const char* data, size_t n, Frame& out, size_t& consumed) {
  if (n < 5) return Parse::incomplete;
  const uint8_t tag = static_cast<uint8_t>(data[0]);
  const uint64_t count = read_le(data + 1, 4);
  const int64_t most = max_items(tag);
  if (most < 0 || int64_t(count) > most || int64_t(count) < min_items(tag)) return Parse::bad;
  size_t off = 5;
  bool complete = true;
  for (uint32_t i = 0; i < count; ++i) {
    if (n - off < 8) return Parse::incomplete;
    const uint64_t len = read_le(data + off, 8);
    if (len > max_item_bytes(tag, i)) return Parse::bad;
    if (tag == kAdd && i == 1 && len != 8) return Parse::bad;
    if (n - off - 8 < len) {  // later lengths are not here yet: wait for more bytes
      complete = false;
      break;
    }
    off += 8 + len;
  }
  if (!complete) return Parse::incomplete;
  out.tag = tag;
  out.items.clear();
  out.items.reserve(count);
  off = 5;
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t len = read_le(data + off, 8);
    out.items.emplace_back(data + off + 8, len);
    off += 8 + len;
  }
  consumed = off;
  return Parse::done;
}

void encode_frame(const Frame& frame, std::string& out) {
  out.push_back(static_cast<char>(frame.tag));
  write_le(frame.items.size(), 4, out);
  for (const std::string& item : frame.items) {
    write_le(item.size(), 8, out);
    out.append(item);
  }
}

std::string encode_i64(int64_t v) {
  std::string s;
  write_le(static_cast<uint64_t>(v), 8, s);
  return s;
}

int64_t decode_i64(const std::string& bytes) {
  KILN_ASSERT(bytes.size() == 8, "an i64 item has ", bytes.size(), " bytes");
  return static_cast<int64_t>(read_le(bytes.data(), 8));
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.release();
  }
  return *this;
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::vector<Address> resolve(const std::string& host, uint16_t port) {
  std::string name = host;
  if (name.size() >= 2 && name.front() == '[' && name.back() == ']') name = name.substr(1, name.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(name.c_str(), service.c_str(), &hints, &found);
  KILN_CHECK_DIST(rc == 0 && found != nullptr, "TCP store: cannot resolve host \"", host, "\": ", ::gai_strerror(rc));
  std::vector<Address> out;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
    Address addr;
    std::memcpy(&addr.storage, a->ai_addr, a->ai_addrlen);
    addr.len = a->ai_addrlen;
    out.push_back(addr);
  }
  ::freeaddrinfo(found);
  KILN_CHECK_DIST(!out.empty(), "TCP store: host \"", host, "\" has no IPv4 or IPv6 address");
  return out;
}

std::string host_port(const std::string& host, uint16_t port) {
  const bool v6 = host.find(':') != std::string::npos && host.front() != '[';
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

bool is_any_address(const std::string& host) {
  return host.empty() || host == "*" || host == "0.0.0.0" || host == "::" || host == "[::]";
}

std::string errno_text(int err) {
  char buf[256];
  return std::string(::strerror_r(err, buf, sizeof buf));
}

void set_nonblocking(int fd, bool on) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace kiln::dist::tcp
