// The TCP store server's protocol state without sockets (parallel/tcp_store_server_core.h, the
// piece fuzz/fuzz_store_protocol.cpp drives): replies, parking and unparking, and hostile frames
// dropping only their own client.
#include "test_util.h"

#include <kiln/parallel/tcp_store_server_core.h>

using namespace kiln::dist::tcp;

namespace {

std::string frame(uint8_t tag, std::vector<std::string> items) {
  std::string out;
  encode_frame(Frame{tag, std::move(items)}, out);
  return out;
}

// Handles everything buffered, as the server's poll loop does, and returns c's replies.
std::vector<Frame> replies(ServerCore& core, uint64_t id) {
  for (bool progress = true; progress;) {
    progress = false;
    for (auto& [cid, c] : core.clients())
      if (!c.dead) progress |= core.handle_frames(cid);
  }
  std::vector<Frame> out;
  std::string& bytes = core.clients().at(id).out;
  size_t pos = 0;
  while (pos < bytes.size()) {
    Frame f;
    size_t used = 0;
    REQUIRE(parse_frame(bytes.data() + pos, bytes.size() - pos, f, used) == Parse::done);
    out.push_back(f);
    pos += used;
  }
  bytes.clear();
  return out;
}

}  // namespace

TEST_CASE("a parked GET is answered when another client sets its key; CANCEL names missing keys") {
  ServerCore core;
  const uint64_t a = core.add_client(), b = core.add_client();
  core.clients().at(a).in = frame(kGet, {"k"});
  CHECK(replies(core, a).empty());
  CHECK(core.waiters().at("k") == std::vector<uint64_t>{a});
  core.clients().at(b).in = frame(kSet, {"k", "v"}) + frame(kAdd, {"n", encode_i64(-3)});
  auto rb = replies(core, b);
  REQUIRE(rb.size() == 2);
  CHECK(decode_i64(rb[1].items.at(0)) == -3);
  auto ra = replies(core, a);
  REQUIRE(ra.size() == 1);
  CHECK(ra[0].tag == kOk);
  CHECK(ra[0].items == std::vector<std::string>{"v"});
  CHECK(core.waiters().empty());

  core.clients().at(a).in = frame(kWait, {"k", "x", "y"}) + frame(kCancel, {});
  ra = replies(core, a);
  REQUIRE(ra.size() == 1);
  CHECK(ra[0].tag == kCancelled);
  CHECK(ra[0].items == std::vector<std::string>{"x", "y"});
  CHECK(core.waiters().empty());
}

TEST_CASE("a malformed frame or a request while parked drops only that client, and its wait") {
  ServerCore core;
  const uint64_t a = core.add_client(), b = core.add_client();
  core.clients().at(a).in = frame(kWait, {"k"}) + frame(kCheck, {"k"});  // only CANCEL may follow
  core.clients().at(b).in = std::string("\x07\0\0\0\0", 5);                // unknown tag
  replies(core, a);
  CHECK(core.clients().at(a).dead);
  CHECK(core.clients().at(b).dead);
  CHECK(core.remove_dead() == std::vector<uint64_t>{a, b});
  CHECK(core.clients().empty());
  CHECK(core.waiters().empty());

  const uint64_t c = core.add_client();
  core.clients().at(c).in = frame(kAdd, {"big", encode_i64(INT64_MAX)}) + frame(kAdd, {"big", encode_i64(1)});
  auto rc = replies(core, c);
  REQUIRE(rc.size() == 2);
  CHECK(rc[1].tag == kError);
  CHECK(rc[1].items.at(0).find("overflows int64") != std::string::npos);
}

TEST_CASE("with a token: requests before HELLO and a wrong token are refused; the right one is served") {
  ServerConfig config;
  config.token = "tok";
  ServerCore core(config);
  const uint64_t early = core.add_client(), wrong = core.add_client(), good = core.add_client();
  core.clients().at(early).in = frame(kSet, {"k", "v"});
  auto r = replies(core, early);
  REQUIRE(r.size() == 1);
  CHECK(r[0].tag == kError);
  CHECK(r[0].items.at(0).find("needs a token") != std::string::npos);
  CHECK(core.clients().at(early).closing);
  core.clients().at(wrong).in = frame(kHello, {"nope"}) + frame(kSet, {"k", "v"});
  r = replies(core, wrong);
  REQUIRE(r.size() == 1);
  CHECK(r[0].items.at(0).find("wrong store token") != std::string::npos);
  CHECK(core.data().empty());
  core.clients().at(good).in = frame(kHello, {"tok"}) + frame(kSet, {"k", "v"});
  r = replies(core, good);
  REQUIRE(r.size() == 2);
  CHECK(r[1].tag == kOk);
  CHECK(core.data().at("k") == "v");
}

TEST_CASE("value and total-byte limits answer ERROR and keep the connection; replacing frees bytes") {
  ServerConfig config;
  config.max_value_bytes = 8;
  config.max_total_bytes = 20;
  ServerCore core(config);
  const uint64_t c = core.add_client();
  core.clients().at(c).in = frame(kSet, {"a", "123456789"}) + frame(kSet, {"a", "12345678"}) +
                            frame(kSet, {"b", "12345678"}) + frame(kSet, {"c", "12345678"}) +
                            frame(kSet, {"a", "1"}) + frame(kSet, {"c", "12345678"});
  auto r = replies(core, c);
  REQUIRE(r.size() == 6);
  CHECK(r[0].tag == kError);  // 9 bytes > 8
  CHECK(r[1].tag == kOk);     // a: 9 bytes held
  CHECK(r[2].tag == kOk);     // b: 18
  CHECK(r[3].tag == kError);  // c would make 27 > 20
  CHECK(r[3].items.at(0).find("the store is full") != std::string::npos);
  CHECK(r[4].tag == kOk);     // a shrinks: 11
  CHECK(r[5].tag == kOk);     // c: 20
  CHECK(core.stored_bytes() == 20);
  CHECK_FALSE(core.clients().at(c).dead);
}
