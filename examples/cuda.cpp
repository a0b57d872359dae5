// CUDA: a model on the GPU fed by a DataLoader whose worker threads build batches into page-locked
// memory (uploaded without waiting for the GPU), bf16 autocast, a profiler trace of one epoch (Chrome
// trace JSON: open it in Perfetto) and the allocator's memory statistics. Exits 77, which ctest
// reports as skipped, when this build has no CUDA or the machine has no GPU.
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <vector>

#include <kiln/kiln.h>

using namespace kiln;

int main() try {
  if (!cuda::is_available()) {
    std::printf("cuda: %s, %d devices: skipped\n", cuda::build_info().c_str(), cuda::device_count());
    return 77;
  }
  const Device gpu = Device::cuda(0);
  Generator teacher_gen(7);
  const Tensor teacher = randn({32, 4}, teacher_gen);
  // Batch b of the dataset is drawn from b's first index, on a worker thread (thread-safe: no shared state).
  data::BatchFn make_batch = [teacher](std::span<const int64_t> indices) {
    Generator gen{uint64_t(indices[0])};
    data::Batch b;
    b.inputs = randn({int64_t(indices.size()), 32}, gen);
    b.targets = tanh(matmul(b.inputs, teacher));
    return b;
  };
  std::vector<int64_t> indices(4096);
  std::iota(indices.begin(), indices.end(), 0);
  const auto loader_options = data::DataLoaderOptions(256).num_workers(2).pin_memory(true).device(gpu);

  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(32, 256), std::make_shared<nn::GELU>(),
                                                std::make_shared<nn::Linear>(256, 4));
  model->to(gpu);  // before the optimizer sees the parameters
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(3e-3));
  reset_peak_memory_stats(gpu);
  double first = 0;
  Tensor last;  // the last batch's loss, read once at the end
  profiler::Trace trace;
  for (int epoch = 0; epoch < 4; ++epoch) {
    if (epoch == 3) profiler::start();  // record the last epoch: ops, backward nodes, memory counters
    data::DataLoader loader(indices, make_batch, loader_options);
    while (auto batch = loader.next()) {  // batch->inputs is already on the GPU
      opt.zero_grad();
      Tensor loss;
      {
        AutocastGuard autocast(DType::bf16);  // matmuls in bf16, reductions and the loss in f32
        loss = mse_loss(model->forward(batch->inputs), batch->targets);
      }
      loss.backward();
      opt.step();
      if (epoch == 0 && batch->index == 0) first = loss.item();  // item() waits for the GPU: rarely
      last = loss.detach();
    }
    if (epoch == 3) trace = profiler::stop();
  }
  profiler::write_chrome_trace("cuda_trace.json", trace);
  const MemoryStats mem = memory_stats(gpu);
  std::printf("%s\nloss %.4f -> %.4f | trace: %zu events, %s | GPU memory: %.2f MiB allocated, %.2f MiB peak,"
              " %.2f MiB reserved, %lld allocations\n", cuda::build_info().c_str(), first, last.item(), trace.events.size(),
              std::filesystem::exists("cuda_trace.json") ? "cuda_trace.json" : "NOT WRITTEN", mem.allocated_bytes / 1048576.0,
              mem.peak_allocated_bytes / 1048576.0, mem.reserved_bytes / 1048576.0, (long long)mem.num_allocs);
  return last.item() < 0.5 * first && !trace.events.empty() && mem.peak_allocated_bytes > 0 ? 0 : 1;
} catch (const Error& e) {
  std::fprintf(stderr, "cuda: %s\n", e.what());
  return 1;
}
