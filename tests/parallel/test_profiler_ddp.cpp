// The profiler under DDP with 2 Gloo ranks: each rank's trace holds its buckets' all-reduces in
// the order the reducer launched them (bucket 0, 1, ... every step, each joined to the Gloo
// worker's run of it), and the merged file has one track group per rank.
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include <kiln/core/profiler/profiler.h>
#include <kiln/core/profiler/summary.h>
#include <kiln/core/profiler/trace.h>

#include "parallel/ddp_fixtures.h"
#include "parallel/temp_dir.h"

using namespace kiln;
using namespace kiln::dist;
using kiln::test::expect;
using kiln::test::run_ranks;
using nlohmann::json;

namespace {

std::string rank_file(const std::string& dir, int rank) { return dir + "/trace.rank" + std::to_string(rank) + ".json"; }

}  // namespace

TEST_CASE("2 Gloo ranks: bucket all-reduces in launch order, joined to the comm side; merged per-rank tracks") {
  test::TempDir dir("kiln_profiler_ddp");
  constexpr int kSteps = 2;
  run_ranks(2, [&](ProcessGroup& pg) {
    test::TrainSpec spec;
    spec.steps = kSteps;
    size_t buckets = 0;
    profiler::start();
    test::train_ddp(pg, spec, test::small_buckets(),
                    [&](DistributedDataParallel& ddp, int) { buckets = ddp.reducer().bucket_count(); });
    const profiler::Trace trace = profiler::stop();
    expect(buckets >= 3, "the small caps give several buckets");

    // Launch order: bucket 0, 1, ..., n-1 each step, with increasing sequence numbers; each is
    // run by the Gloo worker (another track) after its launch began.
    const std::vector<profiler::BucketAllreduce> launched = profiler::bucket_allreduces(trace);
    expect(launched.size() == kSteps * buckets, "one launch per bucket per step, got " + std::to_string(launched.size()));
    for (size_t i = 0; i < launched.size(); ++i) {
      const auto& b = launched[i];
      expect(b.bucket == int64_t(i % buckets), "launch " + std::to_string(i) + " is bucket " + std::to_string(b.bucket));
      expect(i == 0 || b.seq > launched[i - 1].seq, "sequence numbers increase in launch order");
      expect(b.completed(), "bucket launch " + std::to_string(i) + " has its comm event");
      const profiler::TraceEvent &l = trace.events[b.launch], &c = trace.events[b.comm];
      expect(c.track != l.track, "the all-reduce runs on the Gloo worker's track");
      expect(trace.tracks[c.track].name == "gloo worker", "the comm track is named");
      expect(c.start_ns >= l.start_ns, "an all-reduce starts after its launch");
      expect(i == 0 || c.start_ns >= trace.events[launched[i - 1].comm].end_ns(),
             "the worker runs the all-reduces one after another, in launch order");
    }
    const profiler::Summary s = profiler::summarize(trace);
    expect(s.bucket_allreduces == int64_t(kSteps * buckets), "the summary counts the launches");
    expect(s.allreduce_ns > 0 && s.backward_compute_ns > 0, "all-reduce and backward time recorded");
    expect(s.overlapped_fraction >= 0 && s.overlapped_fraction <= 1, "the fraction is a fraction");

    profiler::ChromeTraceOptions options;
    options.pid = pg.rank();
    profiler::write_chrome_trace(rank_file(dir.path, pg.rank()), trace, options);
    pg.barrier()->wait();
    if (pg.rank() != 0) return;
    profiler::merge_chrome_traces({rank_file(dir.path, 0), rank_file(dir.path, 1)}, dir.path + "/trace.json");
    std::ifstream f(dir.path + "/trace.json");
    const json j = json::parse(f);
    std::map<int, std::vector<int64_t>> bucket_order;  // pid -> buckets of the "b" slices, in file order
    std::map<int, std::string> process_names;
    std::set<std::pair<int, int>> tracks;
    for (const json& e : j["traceEvents"]) {
      const int pid = e["pid"];
      if (e["ph"] == "M" && e["name"] == "process_name") process_names[pid] = e["args"]["name"];
      if (e["ph"] == "X") tracks.insert({pid, e["tid"].get<int>()});
      if (e["ph"] == "b") bucket_order[pid].push_back(e["args"]["bucket"].get<int64_t>());
    }
    expect(process_names == std::map<int, std::string>{{0, "rank 0"}, {1, "rank 1"}}, "a process per rank");
    expect(tracks.size() >= 4, "main and gloo worker tracks on both ranks");
    for (int pid : {0, 1}) {
      const auto& order = bucket_order[pid];
      expect(order.size() == kSteps * buckets, "rank " + std::to_string(pid) + " has a slice per bucket all-reduce");
      for (size_t i = 0; i < order.size(); ++i)
        expect(order[i] == int64_t(i % buckets), "rank " + std::to_string(pid) + "'s slices in launch order");
    }
  });
}
