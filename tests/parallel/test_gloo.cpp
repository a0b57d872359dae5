// Gloo process group across real processes (1, 2 and 3 forked ranks, file-store rendezvous): every
// collective and dtype against values computed here, async issue order, refusal of bad inputs,
// and a rank that leaves early being named in the others' errors.
#include "parallel/rank_values.h"
#include "parallel/run_ranks.h"

#include <signal.h>

#include <chrono>
#include <stdexcept>
#include <thread>

using namespace kiln;
using namespace kiln::test;

namespace {

const char* op_str(dist::ReduceOp op) {
  return op == dist::ReduceOp::sum ? "sum" : op == dist::ReduceOp::avg ? "avg" : op == dist::ReduceOp::max ? "max" : "min";
}

void check_all_reductions(dist::ProcessGroup& pg) {
  const int64_t n = 1003;
  for (DType dt : kCollectiveDTypes) {
    for (auto op : {dist::ReduceOp::sum, dist::ReduceOp::avg, dist::ReduceOp::max, dist::ReduceOp::min}) {
      if (op == dist::ReduceOp::avg && !is_floating(dt)) continue;
      Tensor t = rank_tensor(pg.rank(), n, dt);
      pg.allreduce(t, dist::AllreduceOptions().op(op))->wait();
      std::string what = std::string("allreduce ") + op_str(op) + " " + dtype_name(dt) + " on rank " +
                         std::to_string(pg.rank());
      expect_values(t, reduced_all(pg.size(), n, dt, op), kiln::test::rtol_for(dt), what);
    }
  }
}

}  // namespace

TEST_CASE("allreduce sum/avg/max/min in every dtype, 2 and 3 ranks") {
  for (int n : {2, 3}) {
    CAPTURE(n);
    run_ranks(n, check_all_reductions);
  }
}

TEST_CASE("allreduce of a large f32 tensor spans many Gloo segments") {
  run_ranks(2, [](dist::ProcessGroup& pg) {
    const int64_t n = 3 << 18;  // 3 MiB of f32: several 1 MiB segments
    Tensor t = rank_tensor(pg.rank(), n, DType::f32);
    pg.allreduce(t)->wait();
    expect_values(t, reduced_all(2, n, DType::f32, dist::ReduceOp::sum), 1e-6, "large allreduce");
  });
}

TEST_CASE("broadcast from root 1") {
  for (int n : {2, 3}) {
    CAPTURE(n);
    run_ranks(n, [](dist::ProcessGroup& pg) {
      for (DType dt : {DType::f32, DType::i64, DType::bf16}) {
        Tensor t = rank_tensor(pg.rank(), 77, dt);
        pg.broadcast(t, 1)->wait();
        std::vector<double> want(77);
        for (int64_t i = 0; i < 77; ++i) want[i] = contribution(1, i, dt);
        expect_values(t, want, 0, std::string("broadcast ") + dtype_name(dt) + " on rank " + std::to_string(pg.rank()));
      }
    });
  }
}

TEST_CASE("allgather puts every rank's input in rank order") {
  for (int n : {2, 3}) {
    CAPTURE(n);
    run_ranks(n, [](dist::ProcessGroup& pg) {
      Tensor in = rank_tensor(pg.rank(), 5, DType::i32);
      Tensor out = zeros({pg.size(), 5}, DType::i32);
      pg.allgather(out, in)->wait();
      std::vector<double> want;
      for (int r = 0; r < pg.size(); ++r)
        for (int64_t i = 0; i < 5; ++i) want.push_back(contribution(r, i, DType::i32));
      expect_values(out, want, 0, "allgather on rank " + std::to_string(pg.rank()));
    });
  }
}

TEST_CASE("reduce_scatter keeps this rank's reduced chunk") {
  for (int n : {2, 3}) {
    CAPTURE(n);
    run_ranks(n, [](dist::ProcessGroup& pg) {
      const int64_t chunk = 6, total = chunk * pg.size();
      for (auto op : {dist::ReduceOp::sum, dist::ReduceOp::avg, dist::ReduceOp::max}) {
        Tensor in = rank_tensor(pg.rank(), total, DType::f64);
        Tensor out = zeros({chunk}, DType::f64);
        pg.reduce_scatter(out, in, dist::AllreduceOptions().op(op))->wait();
        std::vector<double> all = reduced_all(pg.size(), total, DType::f64, op);
        std::vector<double> want(all.begin() + pg.rank() * chunk, all.begin() + (pg.rank() + 1) * chunk);
        expect_values(out, want, 1e-12, std::string("reduce_scatter ") + op_str(op) + " on rank " +
                                            std::to_string(pg.rank()));
        expect_values(in, rank_tensor(pg.rank(), total, DType::f64).to_vector<double>(), 0,
                      "reduce_scatter left its input unchanged");
      }
    });
  }
}

TEST_CASE("barrier waits for the slowest rank") {
  run_ranks(3, [](dist::ProcessGroup& pg) {
    pg.barrier()->wait();  // line up after the rendezvous
    auto t0 = std::chrono::steady_clock::now();
    if (pg.rank() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(600));
    pg.barrier()->wait();
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    expect(waited >= 0.4, "rank " + std::to_string(pg.rank()) + " left the barrier after " + std::to_string(waited) +
                              " s, before rank 2 (sleeping 0.6 s) arrived");
  });
}

TEST_CASE("collectives issued back to back complete in order") {
  run_ranks(3, [](dist::ProcessGroup& pg) {
    const int count = 24;
    std::vector<Tensor> tensors;
    std::vector<std::shared_ptr<dist::Work>> works;
    uint64_t first = pg.sequence_number();
    for (int k = 0; k < count; ++k) {
      DType dt = kCollectiveDTypes[k % 7];
      tensors.push_back(rank_tensor(pg.rank(), 100 + 37 * k, dt));
      if (k % 5 == 4)
        works.push_back(pg.broadcast(tensors.back(), k % pg.size()));
      else
        works.push_back(pg.allreduce(tensors.back()));
    }
    expect(pg.sequence_number() == first + count, "sequence number did not advance by " + std::to_string(count));
    for (int k = 0; k < count; ++k) {
      works[k]->wait();
      expect(works[k]->is_completed(), "work " + std::to_string(k) + " not completed after wait()");
      DType dt = kCollectiveDTypes[k % 7];
      int64_t n = 100 + 37 * k;
      std::vector<double> want = reduced_all(pg.size(), n, dt, dist::ReduceOp::sum);
      if (k % 5 == 4)
        for (int64_t i = 0; i < n; ++i) want[i] = contribution(k % pg.size(), i, dt);
      expect_values(tensors[k], want, kiln::test::rtol_for(dt), "async collective " + std::to_string(k));
    }
  });
}

TEST_CASE("non-contiguous tensors and avg of integers are refused before taking a sequence number") {
  run_ranks(2, [](dist::ProcessGroup& pg) {
    auto refused = [&](const std::function<void()>& fn, const std::string& needle) {
      uint64_t seq = pg.sequence_number();
      try {
        fn();
      } catch (const Error& e) {
        std::string msg = e.what();
        expect(msg.find(needle) != std::string::npos, "error \"" + msg + "\" lacks \"" + needle + "\"");
        expect(pg.sequence_number() == seq, "a refused call took a sequence number");
        return;
      }
      throw std::runtime_error("expected kiln::Error containing \"" + needle + "\"");
    };
    Tensor t = zeros({4, 6}).t();
    refused([&] { pg.allreduce(t); }, "contiguous");
    refused([&] { pg.broadcast(t, 0); }, "contiguous");
    Tensor out = zeros({2, 24});
    refused([&] { pg.allgather(out, t); }, "contiguous");
    Tensor ints = zeros({4}, DType::i32);
    refused([&] { pg.allreduce(ints, dist::AllreduceOptions().op(dist::ReduceOp::avg)); }, "avg needs a floating");
    refused([&] { pg.broadcast(ints, 2); }, "root 2");
    Tensor small = zeros({3});
    refused([&] { pg.allgather(small, zeros({3})); }, "expected size (2) * input.numel() (3)");
  });
}

TEST_CASE("a rank that leaves early is named in the others' errors") {
  dist::Millis timeout = std::chrono::seconds(2);
  run_ranks(3, [timeout](dist::ProcessGroup& pg) {
    Tensor t = ones({64});
    pg.allreduce(t)->wait();  // sequence number 0: everyone
    if (pg.rank() == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let the peers finish reading
      std::fflush(nullptr);
      ::_exit(0);
    }
    auto t0 = std::chrono::steady_clock::now();
    std::string msg;
    try {
      pg.allreduce(t)->wait();  // sequence number 1: rank 2 never comes
    } catch (const Error& e) {
      msg = e.what();
    }
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    expect(!msg.empty(), "allreduce without rank 2 succeeded on rank " + std::to_string(pg.rank()));
    for (const char* needle : {"allreduce", "sequence number 1", "rank 2", "2000 ms"})
      expect(msg.find(needle) != std::string::npos, "error \"" + msg + "\" lacks \"" + needle + "\"");
    expect(msg.find("rank 0 (") == std::string::npos && msg.find("rank 1 (") == std::string::npos,
           "error names a live rank as late: " + msg);
    expect(took < 2.0 + 4.0, "failure took " + std::to_string(took) + " s with a 2 s timeout");
    // The group is now broken: the next collective fails at once, citing the first failure.
    std::string next;
    try {
      pg.barrier()->wait();
    } catch (const Error& e) {
      next = e.what();
    }
    expect(next.find("barrier (sequence number 2)") != std::string::npos && next.find("failed earlier") != std::string::npos,
           "after a failure, barrier said: \"" + next + "\"");
    std::fflush(nullptr);
    ::_exit(0);
  }, {timeout, std::chrono::seconds(60)});
}

TEST_CASE("a rank that stops issuing collectives is named when the timeout passes") {
  dist::Millis timeout = std::chrono::milliseconds(1500);
  run_ranks(3, [timeout](dist::ProcessGroup& pg) {
    Tensor t = ones({64});
    pg.allreduce(t)->wait();
    pg.barrier()->wait();  // sequence numbers 0 and 1: everyone
    if (pg.rank() == 1) {  // alive, connected, but never issues number 2
      std::this_thread::sleep_for(std::chrono::seconds(5));
      std::fflush(nullptr);
      ::_exit(0);
    }
    auto t0 = std::chrono::steady_clock::now();
    std::string msg;
    try {
      pg.allreduce(t)->wait();
    } catch (const Error& e) {
      msg = e.what();
    }
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const char* needle : {"allreduce (sequence number 2)", "1500 ms", "not reached by rank 1 (last started sequence number 1)"})
      expect(msg.find(needle) != std::string::npos, "error \"" + msg + "\" lacks \"" + needle + "\"");
    expect(took >= 1.2 && took < 1.5 + 3.0, "failure after " + std::to_string(took) + " s with a 1.5 s timeout");
    std::fflush(nullptr);
    ::_exit(0);
  }, {timeout, std::chrono::seconds(60)});
}

TEST_CASE("one rank: every collective runs inline (complete on return), in order, with the usual results") {
  run_ranks(1, [](dist::ProcessGroup& pg) {
    uint64_t first = pg.sequence_number();
    check_all_reductions(pg);
    Tensor t = rank_tensor(0, 7, DType::f32);
    auto work = pg.allreduce(t, dist::AllreduceOptions().op(dist::ReduceOp::avg));
    expect(work->is_completed(), "allreduce on one rank not complete when issued");
    work->wait();
    expect_values(t, rank_tensor(0, 7, DType::f32).to_vector<double>(), 0, "allreduce avg on one rank");
    Tensor out = zeros({5}, DType::i32);
    work = pg.allgather(out, rank_tensor(0, 5, DType::i32));
    expect(work->is_completed(), "allgather on one rank not complete when issued");
    expect_values(out, rank_tensor(0, 5, DType::i32).to_vector<double>(), 0, "allgather on one rank");
    Tensor rs = zeros({6}, DType::f64);
    pg.reduce_scatter(rs, rank_tensor(0, 6, DType::f64))->wait();
    expect_values(rs, rank_tensor(0, 6, DType::f64).to_vector<double>(), 0, "reduce_scatter on one rank");
    Tensor b = rank_tensor(0, 4, DType::u8);
    expect(pg.broadcast(b, 0)->is_completed() && pg.barrier()->is_completed(),
           "broadcast and barrier on one rank not complete when issued");
    expect_values(b, rank_tensor(0, 4, DType::u8).to_vector<double>(), 0, "broadcast on one rank");
    const uint64_t issued = pg.sequence_number() - first;
    expect(issued > 5, "sequence numbers did not advance (" + std::to_string(issued) + ")");
  });
}

TEST_CASE("a group of several ranks ignores SIGPIPE (Note [SIGPIPE and dead peers]); one rank leaves it") {
  auto sigpipe_action = [] {
    struct sigaction current {};
    ::sigaction(SIGPIPE, nullptr, &current);
    return current.sa_handler;
  };
  REQUIRE(bool(sigpipe_action() == SIG_DFL));  // doctest's own process: the default, as in a C++ program
  run_ranks(2, [&](dist::ProcessGroup&) {
    if (sigpipe_action() != SIG_IGN) throw std::runtime_error("SIGPIPE still has its default action");
  });
  run_ranks(1, [&](dist::ProcessGroup&) {
    if (sigpipe_action() != SIG_DFL) throw std::runtime_error("a one-rank group changed SIGPIPE");
  });
}
