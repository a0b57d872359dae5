// TCP store and prefix store: set/get/add/check/wait across clients and threads, blocking reads,
// exact concurrent adds, timeouts and connect failures that name the key and host:port, a client
// that starts before the server, hostile peers (oversized frames), binding to one address only,
// and a rendezvous of forked processes.
#include "test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include <kiln/parallel/store.h>

using namespace kiln;
using namespace kiln::dist;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

TCPStoreOptions options(uint16_t port, bool server, Millis timeout = 10s) {
  return TCPStoreOptions().host("127.0.0.1").port(port).is_server(server).timeout(timeout);
}

std::string where(uint16_t port, const char* host = "127.0.0.1") {
  return std::string(host) + ":" + std::to_string(port);
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A raw connection that writes `bytes` and reports whether the server then closes it.
bool server_drops_connection(uint16_t port, const std::string& bytes) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == ssize_t(bytes.size()));
  timeval tv{3, 0};  // a server that keeps the connection open fails the test after 3 s
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[16];
  const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  const bool dropped = n == 0 || (n < 0 && errno == ECONNRESET);
  ::close(fd);
  return dropped;
}

// Frame header bytes (Note [TCP store protocol]): tag, u32 count, then one u64 item length.
std::string header(uint8_t tag, uint32_t count, uint64_t first_len) {
  std::string s(1, char(tag));
  for (int i = 0; i < 4; ++i) s.push_back(char((count >> (8 * i)) & 0xff));
  for (int i = 0; i < 8; ++i) s.push_back(char((first_len >> (8 * i)) & 0xff));
  return s;
}

long peak_rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

}  // namespace

TEST_CASE("set/get/add/check/wait across a server and two clients") {
  const uint16_t port = dist::pick_free_port();
  auto server = make_tcp_store(options(port, true));
  auto a = make_tcp_store(options(port, false));
  auto b = make_tcp_store(options(port, false));

  a->set("greeting", std::string("hello"));
  CHECK(b->get_string("greeting") == "hello");
  CHECK(server->get_string("greeting") == "hello");
  b->set("greeting", std::string("bye"));
  CHECK(a->get_string("greeting") == "bye");

  Bytes binary = {0, 1, 255, 0, 7};
  a->set("binary", binary);
  CHECK(b->get("binary") == binary);
  a->set("empty", Bytes{});
  CHECK(b->get("empty").empty());

  CHECK(a->add("counter", 5) == 5);
  CHECK(b->add("counter", -7) == -2);
  CHECK(b->get_string("counter") == "-2");
  CHECK(a->add("counter", 0) == -2);

  CHECK_FALSE(a->check("later"));
  std::thread t([&] { b->wait({"later", "greeting"}, 10s); });
  a->set("later", std::string("now"));
  t.join();
  CHECK(a->check("later"));
  CHECK(b->check("later"));

  a->set("not a number", std::string("abc"));
  CHECK_ERROR_CONTAINS(a->add("not a number", 1), "not a number", "not a decimal integer");
  CHECK(a->add("counter", 2) == 0);  // the connection still works after a server-side error
}

TEST_CASE("get blocks until another thread sets the key") {
  const uint16_t port = dist::pick_free_port();
  auto server = make_tcp_store(options(port, true));
  auto reader = make_tcp_store(options(port, false));
  const auto t0 = Clock::now();
  std::thread writer([&] {
    auto w = make_tcp_store(options(port, false));
    std::this_thread::sleep_for(200ms);
    w->set("late", std::string("value"));
  });
  CHECK(reader->get_string("late") == "value");
  CHECK(seconds_since(t0) >= 0.15);
  writer.join();
}

TEST_CASE("concurrent adds from several threads and clients sum exactly") {
  const uint16_t port = dist::pick_free_port();
  auto server = make_tcp_store(options(port, true));
  auto shared = make_tcp_store(options(port, false));  // one client used by several threads
  constexpr int kThreads = 6, kAdds = 300;
  std::vector<std::thread> threads;
  std::atomic<int64_t> max_seen{0};
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      std::shared_ptr<Store> own = i % 2 ? make_tcp_store(options(port, false)) : shared;
      for (int k = 0; k < kAdds; ++k) {
        int64_t v = own->add("sum", i + 1);
        int64_t m = max_seen.load();
        while (v > m && !max_seen.compare_exchange_weak(m, v)) {
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const int64_t expected = int64_t(kAdds) * kThreads * (kThreads + 1) / 2;
  CHECK(shared->add("sum", 0) == expected);
  CHECK(max_seen.load() == expected);
  CHECK(server->get_string("sum") == std::to_string(expected));
}

TEST_CASE("get and wait time out naming the key, host:port and the timeout") {
  const uint16_t port = dist::pick_free_port();
  const std::string w = where(port);  // outlives the message checks
  auto server = make_tcp_store(options(port, true));
  auto client = make_tcp_store(options(port, false, 300ms));

  auto t0 = Clock::now();
  CHECK_ERROR_CONTAINS(client->get("missing-key"), "missing-key", w.c_str(), "300 ms");
  double elapsed = seconds_since(t0);
  CHECK(elapsed >= 0.25);
  CHECK(elapsed < 3.0);

  client->set("present", std::string("1"));
  t0 = Clock::now();
  CHECK_ERROR_CONTAINS(client->wait({"present", "absent"}, 200ms), "waiting for [\"absent\"]", "200 ms",
                       w.c_str());
  elapsed = seconds_since(t0);
  CHECK(elapsed >= 0.15);
  CHECK(elapsed < 3.0);

  // The timed-out requests were cancelled: the same client goes on, and later sets reach it.
  client->set("absent", std::string("here"));
  client->wait({"present", "absent"}, 300ms);
  CHECK(client->get_string("absent") == "here");
  client->set("missing-key", std::string("found"));
  CHECK(client->get_string("missing-key") == "found");
}

TEST_CASE("connecting where nothing listens fails naming host:port within the timeout") {
  const uint16_t port = dist::pick_free_port();
  const std::string w = where(port);  // outlives the message checks
  const auto t0 = Clock::now();
  CHECK_ERROR_CONTAINS(make_tcp_store(options(port, false, 300ms)), w.c_str(), "300 ms");
  const double elapsed = seconds_since(t0);
  CHECK(elapsed >= 0.25);
  CHECK(elapsed < 3.0);
}

TEST_CASE("a client that starts before the server connects once it starts") {
  const uint16_t port = dist::pick_free_port();
  std::string got;
  std::thread early([&] {
    auto client = make_tcp_store(options(port, false, 10s));
    got = client->get_string("from-server");
  });
  std::this_thread::sleep_for(300ms);
  auto server = make_tcp_store(options(port, true));
  server->set("from-server", std::string("hi"));
  early.join();
  CHECK(got == "hi");
}

TEST_CASE("a second server on the same address fails naming host:port") {
  const uint16_t port = dist::pick_free_port();
  const std::string w = where(port);  // outlives the message checks
  auto server = make_tcp_store(options(port, true));
  CHECK_ERROR_CONTAINS(make_tcp_store(options(port, true, 300ms)), "bind", w.c_str());
  CHECK(server->add("still-serving", 1) == 1);
}

TEST_CASE("oversized or malformed frames drop that connection; other clients are served") {
  const uint16_t port = dist::pick_free_port();
  auto server = make_tcp_store(options(port, true));
  auto good = make_tcp_store(options(port, false));
  good->set("k", std::string("v"));
  const long rss_before = peak_rss_kib();

  CHECK(server_drops_connection(port, header(2 /*GET*/, 1, 4097)));                      // key > 4 KiB
  CHECK(server_drops_connection(port, header(1 /*SET*/, 2, 1u << 30)));                 // key of 1 GiB
  CHECK(server_drops_connection(port, header(1 /*SET*/, 2, 3) + "key" +                 // value 1 TiB
                                          header(0, 0, 1ull << 40).substr(5)));
  CHECK(server_drops_connection(port, header(5 /*WAIT*/, 5000, 1) + "k"));              // > 1024 keys
  CHECK(server_drops_connection(port, header(3 /*ADD*/, 2, 1) + "k" + header(0, 0, 4).substr(5) + "1234"));
  CHECK(server_drops_connection(port, std::string("\x77\0\0\0\0", 5)));                 // unknown tag

  const long rss_after = peak_rss_kib();
  CHECK(rss_after - rss_before < 64 * 1024);  // nothing near the declared sizes was allocated
  CHECK(good->get_string("k") == "v");
  CHECK(good->add("n", 3) == 3);

  // The client refuses oversized arguments itself.
  CHECK_ERROR_CONTAINS(good->set(std::string(5000, 'x'), std::string("v")), "5000", "4096");
  // A 64 MiB value is allowed and round-trips.
  Bytes big(64u << 20, 0xab);
  big.back() = 0x01;
  good->set("big", big);
  CHECK(good->get("big") == big);
}

TEST_CASE("the server binds only to the given host address") {
  const uint16_t port = dist::pick_free_port();
  const std::string w2 = where(port, "127.0.0.2");
  auto server = make_tcp_store(options(port, true));
  auto ok = make_tcp_store(options(port, false, 300ms));
  CHECK(ok->add("x", 1) == 1);
  // Linux routes all of 127/8 to lo, so only the bound address makes the difference.
  CHECK_ERROR_CONTAINS(make_tcp_store(TCPStoreOptions().host("127.0.0.2").port(port).timeout(300ms)),
                       w2.c_str());
}

TEST_CASE("prefix stores keep their keys apart under <prefix>/") {
  const uint16_t port = dist::pick_free_port();
  auto base = make_tcp_store(options(port, true));
  auto g1 = make_prefix_store("g1", base);
  auto g2 = make_prefix_store("g2", base);
  g1->set("k", std::string("one"));
  g2->set("k", std::string("two"));
  CHECK(base->get_string("g1/k") == "one");
  CHECK(base->get_string("g2/k") == "two");
  CHECK(g1->get_string("k") == "one");
  CHECK(g1->add("n", 4) == 4);
  CHECK(base->get_string("g1/n") == "4");
  CHECK_FALSE(g2->check("n"));
  CHECK(g2->check("k"));
  g2->wait({"k"}, 1s);
  g1->set_timeout(200ms);
  CHECK_ERROR_CONTAINS(g1->get("nope"), "g1/nope");
  CHECK_ERROR_CONTAINS(g2->wait({"a", "b"}, 200ms), "g2/a", "g2/b");
}

TEST_CASE("forked processes rendezvous through the store") {
  const uint16_t port = dist::pick_free_port();
  // Fork before any store thread exists; the children's clients retry until the server is up.
  std::vector<pid_t> children;
  for (int rank = 1; rank <= 2; ++rank) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int code = 1;
      try {
        auto store = make_tcp_store(options(port, false, 20s));
        const int other = 3 - rank;
        store->set("rank" + std::to_string(rank), std::string("hello from ") + std::to_string(rank));
        store->wait({"rank" + std::to_string(other)}, 20s);
        const bool ok = store->get_string("rank" + std::to_string(other)) ==
                        "hello from " + std::to_string(other);
        store->add("arrived", 1);
        code = ok ? 0 : 3;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", rank, e.what());
        code = 2;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  auto server = make_tcp_store(options(port, true, 20s));
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  CHECK(server->get_string("arrived") == "2");
  CHECK(server->get_string("rank1") == "hello from 1");
}
