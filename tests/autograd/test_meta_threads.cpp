// Autograd state created on several threads at once, while other threads take views of tensors that
// already have it (which reads core's derived-tensor hook). The hook used to be written on every
// AutogradMeta creation: a data race ThreadSanitizer reports; now it is installed once.
#include <atomic>
#include <thread>
#include <vector>

#include "test_util.h"

using namespace kiln;

namespace {

constexpr int kThreads = 4;
constexpr int kIterations = 500;

// Runs body(thread index) on kThreads threads released together; returns how many calls failed.
template <class Body>
int run_together(Body body) {
  std::atomic<bool> go{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      for (int k = 0; k < kIterations; ++k)
        if (!body(i)) failures.fetch_add(1, std::memory_order_relaxed);
    });
  go.store(true, std::memory_order_release);
  for (auto& t : threads) t.join();
  return failures.load();
}

// A fresh leaf gets autograd state; its view must then record history.
bool create_and_view(int) {
  Tensor t = ones({2, 3});
  t.requires_grad_();
  Tensor v = t.reshape({3, 2});
  return t.requires_grad() && !v.is_leaf() && v.requires_grad();
}

}  // namespace

// First in this file (doctest runs a file's cases in order): no tensor in the process has autograd
// state yet, so the threads race to create the first one.
TEST_CASE("the first autograd state may be created on several threads at once") {
  CHECK(run_together(create_and_view) == 0);
}

TEST_CASE("threads create autograd state while others take views of tracked tensors") {
  std::vector<Tensor> tracked;
  for (int i = 0; i < kThreads; ++i) tracked.push_back(ones({4, 4}).requires_grad_());
  int failures = run_together([&](int i) {
    if (i % 2 == 0) return create_and_view(i);
    Tensor v = tracked[i].transpose(0, 1).slice(0, 1, 3);  // reads the hook
    return !v.is_leaf() && v.shape() == Shape{2, 4};
  });
  CHECK(failures == 0);
  // The views recorded real history: the gradient flows back to the leaf.
  Tensor x = tracked[0];
  x.transpose(0, 1).backward(ones({4, 4}));
  test::check_close(x.grad(), std::vector<double>(16, 1.0), 0, 0, "grad through the transposed view");
}
