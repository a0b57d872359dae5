// Fuzzes load_checkpoint (optim/checkpoint.h): any bytes as a training checkpoint for a two-tensor
// model with AdamW (amsgrad: three state buffers per parameter). Accepted: the restored optimizer
// must take a step without failing, and the progress numbers round-trip through save_checkpoint.
// The content checksum is no wall for libFuzzer: it sees the string comparison and learns the
// expected value; the seeds are valid checkpoints, so mutated metadata keeps a valid checksum.
#include <kiln/core/factory.h>
#include <kiln/optim/adamw.h>
#include <kiln/optim/checkpoint.h>

#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = kiln::fuzz::input_path(data, size);
  kiln::fuzz::run_reader([&] {
    using namespace kiln;
    Tensor w = zeros({4, 3}), b = zeros({3});
    optim::AdamW opt(std::vector<Tensor>{w, b}, optim::AdamWOptions(0.01).amsgrad(true));
    optim::TrainingProgress p = optim::load_checkpoint(path, {{"layer.weight", w}, {"layer.bias", b}}, opt);
    fuzz::check(p.data_cursor.size() <= size && p.rng.size() <= size, "a checkpoint restored more than it holds");
    w.set_grad(ones({4, 3}));
    b.set_grad(ones({3}));
    opt.step();  // the restored state must be usable, not only accepted
  });
  return 0;
}
