// FaultQueue, the CUDA-free bookkeeping of Note [Deferred device checks]: records are retired in
// issue order once they reached the host, the first fault raises its op's error marked late and
// empties the queue, push() reports earlier faults, drain() waits for every record, and the queue
// stays bounded.
#include "caught.h"
#include "test_util.h"

#include <memory>
#include <stdexcept>
#include <string>

#include <kiln/core/cuda/runtime/fault_queue.h>

using namespace kiln;
using kiln::cuda::FaultQueue;
using kiln::cuda::FaultRecord;

namespace {

// A fake device record: `done` flips when the "device" gets there; waiting makes it done.
struct Fake {
  bool done = false;
  int waits = 0;
  FaultRecord record;
};

struct Raised : std::runtime_error {
  using std::runtime_error::runtime_error;
};

FaultQueue::Entry entry(const std::shared_ptr<Fake>& f, const std::string& op) {
  return {[f] { return f->done; },
          [f] {
            ++f->waits;
            f->done = true;
          },
          [f] { return f->record; },
          [op](int64_t position, int64_t value, bool late) {
            throw Raised(op + " position " + std::to_string(position) + " value " + std::to_string(value) +
                         (late ? " late" : " now"));
          }};
}

std::shared_ptr<Fake> fake(int64_t position = -1, int64_t value = 0) {
  auto f = std::make_shared<Fake>();
  f->record = {position, value};
  return f;
}

std::string raised_by(const std::function<void()>& fn) { return test::caught<Raised>(fn); }

}  // namespace

TEST_CASE("FaultQueue: clean records retire once done, in issue order; nothing is raised") {
  FaultQueue q;
  auto a = fake(), b = fake(), c = fake();
  q.push(entry(a, "a"));
  q.push(entry(b, "b"));
  q.push(entry(c, "c"));
  CHECK(q.size() == 3);
  b->done = true;  // b is there but a is not: nothing retires past a
  q.poll();
  CHECK(q.size() == 3);
  a->done = true;
  q.poll();
  CHECK(q.size() == 1);  // a and b retired, c still on its way
  CHECK(a->waits == 0);  // polling never waits
  q.drain();
  CHECK(q.size() == 0);
  CHECK(c->waits == 1);  // drain waited for it
}

TEST_CASE("FaultQueue: the first fault in issue order is raised, late, and empties the queue") {
  FaultQueue q;
  auto a = fake(), bad1 = fake(3, 42), bad2 = fake(0, -7), d = fake();
  for (auto& [f, name] : {std::pair{a, "a"}, std::pair{bad1, "bad1"}, std::pair{bad2, "bad2"}, std::pair{d, "d"}})
    q.push(entry(f, name));
  bad2->done = true;
  CHECK(raised_by([&] { q.poll(); }).empty());  // bad2 is there, but a and bad1 are not yet
  a->done = bad1->done = true;
  CHECK(raised_by([&] { q.poll(); }) == "bad1 position 3 value 42 late");
  CHECK(q.size() == 0);  // bad2 and d dropped: consequences of the first error, usually
  q.drain();             // nothing left to raise
}

TEST_CASE("FaultQueue: push() raises a fault that already reached the host; drain() waits for it") {
  FaultQueue q;
  auto bad = fake(1, 9);
  q.push(entry(bad, "bad"));
  bad->done = true;
  auto next = fake();
  CHECK(raised_by([&] { q.push(entry(next, "next")); }) == "bad position 1 value 9 late");
  CHECK(q.size() == 0);  // `next` was not queued: its op is the one that reported the error
  auto pending = fake(5, 6);
  q.push(entry(pending, "pending"));
  CHECK(raised_by([&] { q.drain(); }) == "pending position 5 value 6 late");
  CHECK(pending->waits == 1);
}

TEST_CASE("FaultQueue: more than kMaxPending records make push() wait for the oldest") {
  FaultQueue q;
  std::vector<std::shared_ptr<Fake>> all;
  for (size_t i = 0; i < FaultQueue::kMaxPending + 5; ++i) {
    all.push_back(fake());
    q.push(entry(all.back(), "op"));
    CHECK(q.size() <= FaultQueue::kMaxPending);
  }
  CHECK(all[0]->waits == 1);
  CHECK(all[4]->waits == 1);
  CHECK(all[5]->waits == 0);
  q.drain();
  CHECK(q.size() == 0);
}
