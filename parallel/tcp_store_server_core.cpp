// The TCP store server's request handling, free of sockets (tcp_store_server_core.h): SET, GET,
// ADD, CHECK, WAIT, CANCEL and HELLO against the key-value map, parking and unparking GET/WAIT,
// with the token and the size limits of ServerConfig.
#include "tcp_store_server_core.h"

#include <charconv>

namespace kiln::dist::tcp {
namespace {

// Compares without stopping at the first difference, so timing does not leak the token's prefix.
bool same_token(const std::string& a, const std::string& b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < a.size(); ++i) diff |= unsigned(uint8_t(a[i]) ^ uint8_t(b.empty() ? 0 : b[i % b.size()]));
  return diff == 0;
}

}  // namespace

uint64_t ServerCore::add_client() {
  const uint64_t id = next_id_++;
  clients_[id];
  return id;
}

void ServerCore::refuse(uint64_t id, const std::string& why) {
  ClientState& c = clients_.at(id);
  if (c.closing || c.dead) return;
  unpark(id, c);
  reply(c, kError, {why.substr(0, kMaxKeyBytes)});
  c.closing = true;
  c.in.clear();
}

size_t ServerCore::open_clients() const {
  size_t n = 0;
  for (const auto& [id, c] : clients_) n += !c.dead && !c.closing;
  return n;
}

bool ServerCore::handle_frames(uint64_t id) {
  ClientState& c = clients_.at(id);
  bool progress = false;
  size_t pos = 0;
  Frame req;
  if (c.closing) {
    c.in.clear();
    return false;
  }
  while (!c.dead && !c.closing && c.out.size() <= kOutHighWater) {
    size_t used = 0;
    const Parse p = parse_frame(c.in.data() + pos, c.in.size() - pos, req, used);
    if (p == Parse::incomplete) break;
    if (p == Parse::bad || req.tag >= kOk || (c.parked && req.tag != kCancel)) {
      c.dead = true;  // a broken or hostile peer: drop it, keep serving the others
      return progress;
    }
    pos += used;
    progress = true;
    if (!c.authed && req.tag != kHello && !config_.token.empty()) {
      refuse(id, "this store needs a token: set KILN_STORE_TOKEN to the job's token");
      return progress;
    }
    handle(id, c, req);
  }
  if (c.closing) c.in.clear();
  else c.in.erase(0, pos);
  return progress;
}

std::vector<uint64_t> ServerCore::remove_dead() {
  std::vector<uint64_t> gone;
  for (auto& [id, c] : clients_)
    if (c.dead) {
      unpark(id, c);
      gone.push_back(id);
    }
  for (uint64_t id : gone) clients_.erase(id);
  return gone;
}

void ServerCore::handle(uint64_t id, ClientState& c, Frame& req) {
  switch (req.tag) {
    case kHello:
      if (!config_.token.empty() && !same_token(req.items[0], config_.token)) {
        refuse(id, req.items[0].empty() ? "this store needs a token: set KILN_STORE_TOKEN to the job's token"
                                        : "wrong store token: KILN_STORE_TOKEN differs from the server's");
        return;
      }
      c.authed = true;
      reply(c, kOk);
      return;
    case kSet: {
      std::string key = req.items[0];
      if (store(c, key, std::move(req.items[1]))) {
        reply(c, kOk);
        notify(key);
      }
      return;
    }
    case kAdd: {
      const std::string& key = req.items[0];
      int64_t value = 0;
      if (auto it = data_.find(key); it != data_.end()) {
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
      if (store(c, key, std::to_string(value))) {
        reply(c, kOk, {encode_i64(value)});
        notify(key);
      }
      return;
    }
    case kCheck:
      reply(c, kOk, {std::string(1, data_.count(req.items[0]) ? '\1' : '\0')});
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
          if (!data_.count(k)) missing.push_back(k);
        unpark(id, c);
      }
      reply(c, kCancelled, std::move(missing));
      return;
    }
    default:
      c.dead = true;
  }
}

bool ServerCore::store(ClientState& c, const std::string& key, std::string value) {
  if (value.size() > config_.max_value_bytes) {
    reply(c, kError, {"set(\"" + key.substr(0, 256) + "\"): a value of " + std::to_string(value.size()) +
                          " bytes exceeds the server's limit of " + std::to_string(config_.max_value_bytes) + " bytes"});
    return false;
  }
  auto it = data_.find(key);
  const size_t old = it == data_.end() ? 0 : key.size() + it->second.size();
  const size_t total = stored_bytes_ - old + key.size() + value.size();
  if (total > config_.max_total_bytes && total > stored_bytes_) {
    reply(c, kError, {"set(\"" + key.substr(0, 256) + "\"): the store is full (" + std::to_string(stored_bytes_) +
                          " bytes held, this would make " + std::to_string(total) + ", the limit is " +
                          std::to_string(config_.max_total_bytes) + ")"});
    return false;
  }
  stored_bytes_ = total;
  if (it == data_.end()) data_.emplace(key, std::move(value));
  else it->second = std::move(value);
  return true;
}

// Answers c's parked request if all its keys exist; otherwise parks it on the first missing key.
bool ServerCore::try_answer(uint64_t id, ClientState& c) {
  for (const std::string& k : c.waiting.items) {
    if (!data_.count(k)) {
      waiters_[k].push_back(id);
      c.parked_on = k;
      return false;
    }
  }
  c.parked = false;
  if (c.waiting.tag == kGet) reply(c, kOk, {data_.at(c.waiting.items[0])});
  else reply(c, kOk);
  c.waiting.items.clear();
  return true;
}

void ServerCore::notify(const std::string& key) {
  auto node = waiters_.extract(key);
  if (node.empty()) return;
  for (uint64_t id : node.mapped()) {
    auto it = clients_.find(id);
    if (it != clients_.end() && it->second.parked) try_answer(id, it->second);
  }
}

// Forgets c's parked request (cancelled, or its peer is gone).
void ServerCore::unpark(uint64_t id, ClientState& c) {
  if (!c.parked) return;
  c.parked = false;
  c.waiting.items.clear();
  if (auto it = waiters_.find(c.parked_on); it != waiters_.end()) {
    std::erase(it->second, id);
    if (it->second.empty()) waiters_.erase(it);
  }
}

}  // namespace kiln::dist::tcp
