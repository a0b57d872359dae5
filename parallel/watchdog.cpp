// The shared half of the process groups' failure handling: heartbeat, late-rank naming, flight
// recorder dump, fault injection. The groups own the deadlines (they know their collectives).
#include <kiln/parallel/watchdog.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <vector>

#include <kiln/core/error.h>
#include <kiln/core/profiler/profiler.h>

namespace kiln::dist {
namespace {

using Clock = std::chrono::steady_clock;

// Note [Watchdog]
// Every collective has a deadline: issued + timeout. The group's poll (every 50 ms, on the
// watchdog's poll thread, never on the caller's) compares the oldest unfinished collective with
// it; on expiry, or on an error the backend reports (a closed Gloo connection, an asynchronous
// NCCL error), the group fails: NCCL aborts its communicator, and every pending and later Work
// throws DistributedError with the report built here. Timeouts are therefore enforced even when
// nobody waits on the host (NCCL's default non-blocking wait).
//
// Naming the ranks that did not arrive costs nothing per collective: the hot path only stores
// the started sequence number in an atomic. A heartbeat thread publishes "<started> <beat>" to
// the store key watchdog/<rank> every 500 ms (one small set per rank, off the hot path; the store
// may be slow or gone without delaying any collective). On failure, the reporting rank publishes
// its own progress at once and reads the peers' for at least one heartbeat (a live peer that had
// started the collective publishes it within one) and until every late peer's beat has moved, at
// most four heartbeats: a peer still short of the sequence number is named with the last one it
// started, and a peer whose beat never moved in the four is called dead or frozen (a loaded
// machine may delay a beat by a second; four make a false "dead" unlikely). So a report takes
// about 0.75 s more with a live straggler, 2.25 s with a dead one. The reporting rank also sets watchdog/failure, which the peers'
// heartbeats notice: a rank stuck outside any collective (hung in user code) still dumps its
// flight recorder, as PyTorch's dump-on-peer-failure does.
std::string heartbeat_key(int rank) { return "watchdog/" + std::to_string(rank); }
constexpr const char* kFailureKey = "watchdog/failure";

struct PeerProgress {
  bool seen = false;   // the key existed at some read
  int64_t started = -1;
  int64_t first_beat = -1, beat = -1;
};

void parse_progress(const std::string& text, PeerProgress& p) {
  std::istringstream in(text);
  int64_t started = -1, beat = -1;
  if (!(in >> started >> beat)) return;
  if (!p.seen) p.first_beat = beat;
  p.seen = true;
  p.started = started;
  p.beat = beat;
}

std::string started_text(int64_t started) {
  return started < 0 ? "started no collective" : "last started sequence number " + std::to_string(started);
}

}  // namespace

Watchdog::Watchdog(std::shared_ptr<Store> store, WatchdogOptions options)
    : store_(std::move(store)),
      options_(std::move(options)),
      recorder_(FlightRecorder::capacity_from_env()),
      fault_(fault_injection_from_env()) {
  if (fault_ && fault_->rank == options_.rank)
    std::fprintf(stderr, "kiln: rank %d: KILN_FAULT_INJECT=%s is armed on this rank's %s group\n", options_.rank,
                 fault_->str().c_str(), options_.backend.c_str());
}

Watchdog::~Watchdog() { stop(); }

void Watchdog::start(std::function<void()> poll) {
  poll_thread_ = std::thread([this, poll = std::move(poll)] { poll_loop(poll); });
  if (options_.size > 1 && store_)
    heartbeat_thread_ = std::thread([self = shared_from_this()] {
      self->heartbeat_loop();
      std::lock_guard<std::mutex> lock(self->mutex_);
      self->heartbeat_done_ = true;
      self->cv_.notify_all();
    });
}

void Watchdog::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    released_ = true;
  }
  cv_.notify_all();
  if (poll_thread_.joinable()) poll_thread_.join();
  if (!heartbeat_thread_.joinable()) return;
  // A heartbeat stuck in the store (its server died with its host; a TCP store reconnects until
  // its timeout) must not hold up the group's destruction: after a short grace it is left to
  // finish on its own (it owns a reference to this Watchdog).
  bool done = false;
  if (std::this_thread::get_id() != heartbeat_thread_.get_id()) {
    std::unique_lock<std::mutex> lock(mutex_);
    done = cv_.wait_for(lock, std::chrono::seconds(1), [&] { return heartbeat_done_; });
  }
  if (done)
    heartbeat_thread_.join();
  else
    heartbeat_thread_.detach();
}

void Watchdog::poll_loop(std::function<void()> poll) {
  profiler::set_thread_name(options_.backend + " watchdog");
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    cv_.wait_for(lock, options_.poll, [&] { return stop_; });
    if (stop_) break;
    lock.unlock();
    try {
      poll();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln: the %s watchdog of rank %d failed: %s\n", options_.backend.c_str(), options_.rank,
                   e.what());
    }
    lock.lock();
  }
}

void Watchdog::heartbeat_loop() {
  profiler::set_thread_name(options_.backend + " heartbeat");
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    lock.unlock();
    try {
      publish();
      watch_peer_failure();
    } catch (const std::exception&) {
      // The store is gone or slow (its owner died): the collectives' own deadlines still hold,
      // and a failure report says the progress could not be read.
    }
    lock.lock();
    cv_.wait_for(lock, options_.heartbeat, [&] { return stop_; });
  }
}

void Watchdog::publish() {
  std::lock_guard<std::mutex> lock(publish_mutex_);
  store_->set(heartbeat_key(options_.rank), std::to_string(last_started()) + " " + std::to_string(beat_++));
}

void Watchdog::watch_peer_failure() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (reported_) return;
  }
  if (!store_->check(kFailureKey)) return;
  const std::string peer = store_->get_string(kFailureKey);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (reported_) return;
    reported_ = true;
  }
  const std::string where = dump("a peer failed: " + peer);
  std::fprintf(stderr, "kiln: rank %d (%s group, last started sequence number %lld): a peer failed (%s); flight "
               "recorder: %s\n", options_.rank, options_.backend.c_str(), static_cast<long long>(last_started()),
               peer.c_str(), where.c_str());
}

bool Watchdog::stall_fires(uint64_t seq) const {
  return fault_ && fault_->kind == FaultInjection::Kind::stall && fault_->fires(options_.rank, seq);
}

void Watchdog::maybe_inject(uint64_t seq) {
  if (!fault_ || !fault_->fires(options_.rank, seq)) return;
  std::fprintf(stderr, "kiln: rank %d: KILN_FAULT_INJECT=%s: %s before %s collective #%llu\n", options_.rank,
               fault_->str().c_str(), fault_->kind == FaultInjection::Kind::exit ? "exiting" : "stalling",
               options_.backend.c_str(), static_cast<unsigned long long>(seq));
  std::fflush(nullptr);
  if (fault_->kind == FaultInjection::Kind::exit) ::_exit(9);
  std::unique_lock<std::mutex> lock(mutex_);
  const auto until = fault_->duration.count() > 0 ? Clock::now() + fault_->duration : Clock::time_point::max();
  cv_.wait_until(lock, until, [&] { return released_; });
}

void Watchdog::release() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    released_ = true;
  }
  cv_.notify_all();
}

std::string Watchdog::dump_path() const {
  return detail::str_cat(flight_recorder_dir(), "/kiln_flight_recorder_", options_.backend, "_rank", options_.rank,
                         "_pid", ::getpid(), ".jsonl");
}

std::string Watchdog::dump(const std::string& reason) {
  const std::string path = dump_path();
  try {
    std::string header = detail::str_cat(
        "{\"kiln_flight_recorder\":1,\"backend\":", json_quote(options_.backend), ",\"rank\":", options_.rank,
        ",\"world_size\":", options_.size, ",\"pid\":", ::getpid(), ",\"timeout_ms\":", options_.timeout.count(),
        ",\"last_started\":", last_started(), ",\"entries\":", recorder_.records().size(),
        ",\"dumped_us\":", wall_clock_us(), ",\"reason\":", json_quote(reason), "}");
    recorder_.dump(path, header);
    return path;
  } catch (const std::exception& e) {
    return std::string("not written: ") + e.what();
  }
}

// The peers' progress as a report reads it: filled by a thread of its own (below).
struct Watchdog::ProgressRead {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;       // the peers' progress is read (or could not be)
  bool announced = false;  // the failure note is in the store (or could not be put there)
  std::vector<PeerProgress> peers;
  std::string error;
};

std::string Watchdog::late_ranks(uint64_t seq) { return late_ranks(seq, ""); }

// The store I/O runs on a detached thread holding this Watchdog: a store whose server died (it
// lived in a dead rank's process) may block its caller until the store's timeout, and the report
// must not wait for that. The caller takes what was read when the window closes.
std::string Watchdog::late_ranks(uint64_t seq, const std::string& failure_note) {
  const int64_t want = static_cast<int64_t>(seq);
  auto read = std::make_shared<ProgressRead>();
  read->peers.resize(options_.size);
  const bool peers_exist = options_.size > 1 && store_ != nullptr;
  if (peers_exist) {
    std::thread([self = shared_from_this(), read, want, failure_note] {
      std::vector<PeerProgress> peers(self->options_.size);
      std::string error;
      try {
        const auto start = Clock::now();
        const auto settled = start + self->options_.heartbeat + Millis(250);
        const auto deadline = start + self->liveness_window();
        self->publish();
        while (true) {
          bool any_late = false, all_late_alive = true;
          for (int r = 0; r < self->options_.size; ++r) {
            if (r == self->options_.rank) continue;
            if (self->store_->check(heartbeat_key(r))) parse_progress(self->store_->get_string(heartbeat_key(r)), peers[r]);
            if (peers[r].started >= want) continue;
            any_late = true;
            all_late_alive = all_late_alive && peers[r].seen && peers[r].beat != peers[r].first_beat;
          }
          {
            std::lock_guard<std::mutex> lock(read->mutex);
            read->peers = peers;
          }
          const auto now = Clock::now();
          if (!any_late || now >= deadline || (all_late_alive && now >= settled)) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      } catch (const std::exception& e) {
        error = e.what();
      }
      {
        std::lock_guard<std::mutex> lock(read->mutex);
        read->error = error;
        read->done = true;
      }
      read->cv.notify_all();
      if (failure_note.empty()) return;
      try {  // tell the peers (their heartbeats dump their flight recorders)
        if (!self->store_->check(kFailureKey)) self->store_->set(kFailureKey, failure_note);
      } catch (const std::exception&) {
        // the peers' own deadlines still hold
      }
      {
        std::lock_guard<std::mutex> lock(read->mutex);
        read->announced = true;
      }
      read->cv.notify_all();
    }).detach();
  }
  std::vector<PeerProgress> peers(options_.size);
  std::string store_error;
  if (peers_exist) {
    const Millis limit = liveness_window() + std::chrono::seconds(1);
    std::unique_lock<std::mutex> lock(read->mutex);
    if (!read->cv.wait_for(lock, limit, [&] { return read->done; }))
      store_error = detail::str_cat("the store did not answer within ", limit.count(), " ms (is its host gone?)");
    else
      store_error = read->error;
    peers = read->peers;
    // Note [Announce before throwing]: the failure note reaches the store before this rank's
    // error is raised, so a rank that exits on the error (or _exits in a test) has still told its
    // peers to dump their flight recorders. The wait is bounded: a store that stopped answering
    // holds up the report by at most a second more.
    if (!failure_note.empty() && store_error.empty())
      read->cv.wait_for(lock, std::chrono::seconds(1), [&] { return read->announced; });
  }
  std::ostringstream late;
  int count = 0;
  const double waited = std::chrono::duration<double>(liveness_window()).count();
  for (int r = 0; r < options_.size; ++r) {
    if (r == options_.rank) {
      if (last_started() >= want) continue;
      late << (count++ ? ", " : "") << "rank " << r << " (this rank, " << started_text(last_started()) << ")";
      continue;
    }
    if (!store_error.empty()) continue;
    const PeerProgress& p = peers[r];
    if (p.started >= want) continue;
    late << (count++ ? ", " : "") << "rank " << r << " (" << started_text(p.started);
    if (!p.seen)
      late << "; no heartbeat ever: it died or never joined";
    else if (p.beat == p.first_beat)
      late << "; no heartbeat for " << waited << " s: dead or frozen";
    late << ")";
  }
  std::string out;
  if (count > 0)
    out = "not reached by " + late.str();
  else if (store_error.empty())
    out = "every rank started sequence number " + std::to_string(seq) +
          " (a peer failed inside it, or the ranks issued different collectives)";
  if (!store_error.empty())
    out += std::string(out.empty() ? "" : "; ") + "the peers' progress could not be read from the store: " + store_error;
  return out;
}

std::string Watchdog::report_failure(const char* op, uint64_t seq, const std::string& what) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    reported_ = true;  // the heartbeat no longer dumps on a peer's signal: this report does
  }
  const std::string note = detail::str_cat("rank ", options_.rank, ": ", options_.backend, " ", op,
                                           " (sequence number ", seq, ")");
  std::string message = what + "; " + late_ranks(seq, note);
  return message + "; flight recorder: " + dump(message);
}

}  // namespace kiln::dist
