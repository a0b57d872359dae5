// TCP store hardening: binding every interface and IPv6, the shared token (KILN_STORE_TOKEN)
// refused with a clear error, and the server's limits on connections, value size and total bytes,
// each refused while the other clients are served on; a flood of connections does not stop a
// working client.
#include "caught.h"
#include "test_util.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include <kiln/parallel/launcher.h>
#include <kiln/parallel/store.h>

using namespace kiln;
using namespace kiln::dist;
using namespace std::chrono_literals;

namespace {

TCPStoreOptions opts(uint16_t port, bool server) {
  return TCPStoreOptions().host("127.0.0.1").port(port).is_server(server).timeout(5s);
}

bool has_ipv6_loopback() {
  int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// A non-loopback IPv4 address of this machine, or "".
std::string other_ipv4() {
  ifaddrs* ifs = nullptr;
  std::string found;
  if (::getifaddrs(&ifs) != 0) return found;
  for (ifaddrs* i = ifs; i && found.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
    if (std::string(buf).rfind("127.", 0) != 0) found = buf;
  }
  ::freeifaddrs(ifs);
  return found;
}

// A raw TCP connection to 127.0.0.1:port (-1 when refused).
int raw_connect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

TEST_CASE("a store bound to every interface answers on loopback, on another address and on IPv6") {
  const auto port = uint16_t(pick_free_port());
  auto server = make_tcp_store(opts(port, true).bind("*"));
  server->set("k", "v");
  CHECK(make_tcp_store(opts(port, false))->get_string("k") == "v");
  if (const std::string other = other_ipv4(); !other.empty())
    CHECK(make_tcp_store(opts(port, false).host(other))->get_string("k") == "v");
  if (has_ipv6_loopback()) CHECK(make_tcp_store(opts(port, false).host("::1"))->get_string("k") == "v");
}

TEST_CASE("an IPv6 store: server and clients on ::1, brackets allowed") {
  if (!has_ipv6_loopback()) {
    MESSAGE("no IPv6 loopback here: skipped");
    return;
  }
  const auto port = uint16_t(pick_free_port());
  auto server = make_tcp_store(opts(port, true).host("::1"));
  auto client = make_tcp_store(opts(port, false).host("[::1]"));
  client->set("x", "6");
  CHECK(server->add("x", 1) == 7);
  // Bound to ::1 only: IPv4 loopback finds nothing.
  CHECK(test::caught<Error>([&] { make_tcp_store(opts(port, false).timeout(300ms)); }).find("could not connect") !=
        std::string::npos);
}

TEST_CASE("a wrong or missing token is refused with a clear error; the right one works") {
  const auto port = uint16_t(pick_free_port());
  auto server = make_tcp_store(opts(port, true).token("s3cret"));
  auto good = make_tcp_store(opts(port, false).token("s3cret"));
  good->set("a", "1");
  const std::string wrong = test::caught<Error>([&] { make_tcp_store(opts(port, false).token("guess")); });
  CHECK(wrong.find("wrong store token") != std::string::npos);
  CHECK(wrong.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  ::unsetenv("KILN_STORE_TOKEN");
  const std::string none = test::caught<Error>([&] { make_tcp_store(opts(port, false)); });
  CHECK(none.find("needs a token") != std::string::npos);
  // The token also comes from KILN_STORE_TOKEN.
  ::setenv("KILN_STORE_TOKEN", "s3cret", 1);
  CHECK(make_tcp_store(opts(port, false))->get_string("a") == "1");
  ::unsetenv("KILN_STORE_TOKEN");
  // A raw peer that sends a request without HELLO gets an ERROR and is closed; nothing is stored.
  int fd = raw_connect(port);
  REQUIRE(fd >= 0);
  std::string frame(1, char(1));  // SET("evil", "x")
  auto le = [&](uint64_t v, int n) { for (int i = 0; i < n; ++i) frame.push_back(char((v >> (8 * i)) & 0xff)); };
  le(2, 4), le(4, 8), frame += "evil", le(1, 8), frame += "x";
  REQUIRE(::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL) == ssize_t(frame.size()));
  std::string got;
  char buf[512];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) got.append(buf, size_t(n));
  ::close(fd);
  REQUIRE(!got.empty());
  CHECK(uint8_t(got[0]) == 0x82);  // ERROR, then the server closed the connection
  CHECK(got.find("needs a token") != std::string::npos);
  CHECK_FALSE(good->check("evil"));
  CHECK(good->add("n", 2) == 2);  // the good client was served throughout
}

TEST_CASE("over the connection limit a client is refused naming the limit; a freed slot is reused") {
  const auto port = uint16_t(pick_free_port());
  auto server = make_tcp_store(opts(port, true).max_connections(3));  // its own client is one
  auto c1 = make_tcp_store(opts(port, false));
  auto c2 = make_tcp_store(opts(port, false));
  const std::string full = test::caught<Error>([&] { make_tcp_store(opts(port, false)); });
  CHECK(full.find("too many connections") != std::string::npos);
  CHECK(full.find("at most 3") != std::string::npos);
  c2.reset();
  std::shared_ptr<Store> c3;
  for (int i = 0; i < 50 && !c3; ++i) {  // the server notices the closed slot on its next poll
    try {
      c3 = make_tcp_store(opts(port, false));
    } catch (const Error&) {
      std::this_thread::sleep_for(20ms);
    }
  }
  REQUIRE(c3 != nullptr);
  c3->set("k", "v");
  CHECK(c1->get_string("k") == "v");
}

TEST_CASE("a value over the server's limit and a full store fail that request only") {
  const auto port = uint16_t(pick_free_port());
  auto server = make_tcp_store(opts(port, true).max_value_bytes(100).max_total_bytes(1000));
  auto client = make_tcp_store(opts(port, false));
  const std::string big = test::caught<Error>([&] { client->set("big", std::string(101, 'x')); });
  CHECK(big.find("exceeds the server's limit of 100 bytes") != std::string::npos);
  CHECK_FALSE(client->check("big"));
  int stored = 0;
  std::string full;
  for (int i = 0; i < 20 && full.empty(); ++i) {
    full = test::caught<Error>([&] { client->set("k" + std::to_string(i), std::string(98, 'v')); });
    stored += full.empty();
  }
  CHECK(stored == 10);  // 10 x (2 + 98) bytes
  CHECK(full.find("the store is full") != std::string::npos);
  CHECK(full.find("the limit is 1000") != std::string::npos);
  client->set("k0", std::string(98, 'w'));  // replacing a value of the same size fits
  CHECK(server->get_string("k0") == std::string(98, 'w'));
}

TEST_CASE("a flood of connections is refused while a connected client keeps working") {
  const auto port = uint16_t(pick_free_port());
  auto server = make_tcp_store(opts(port, true).max_connections(16).token("t"));
  auto worker = make_tcp_store(opts(port, false).token("t"));
  std::vector<int> flood;
  for (int i = 0; i < 300; ++i)
    if (int fd = raw_connect(port); fd >= 0) flood.push_back(fd);
  CHECK(flood.size() >= 16);
  for (int i = 0; i < 50; ++i) CHECK(worker->add("steps", 1) == i + 1);
  // The refused ones got an ERROR naming the limit.
  int refused = 0;
  for (int fd : flood) {
    timeval tv{0, 200000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[256];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    refused += n > 0 && std::string(buf, size_t(n)).find("too many connections") != std::string::npos;
    ::close(fd);
  }
  CHECK(refused >= int(flood.size()) - 16);
  CHECK(worker->get_string("steps") == "50");
}
