// train_cifar's data: the train and test splits (the official files or the synthetic set) and the
// order in which a rank's batch is cut into gradient-accumulation micro-batches.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <kiln/data/cifar10.h>

namespace kiln::apps {

struct CifarDataOptions {
  std::string data_dir;    // the official binary batches; empty: the synthetic set
  bool synthetic = false;  // the synthetic set even with a data_dir
  int64_t train_size = 0;  // the first N images (synthetic: N generated); 0: all (synthetic: 50000)
  int64_t test_size = 0;   // likewise; 0: all (synthetic: 10000)
};

// {train, test}; `announce`: print the synthetic-data notice when the synthetic set is used.
std::pair<data::Cifar10Dataset, data::Cifar10Dataset> load_cifar_splits(const CifarDataOptions& o, bool announce);

// The sampler's indices reordered inside each per-rank batch so that micro-step m of
// `accum` gets positions m, m + accum, ... of the batch, contiguously.
std::vector<int64_t> interleave_micro_batches(const std::vector<int64_t>& indices, int64_t batch, int64_t accum);

}  // namespace kiln::apps
