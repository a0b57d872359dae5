// load_cifar_splits / interleave_micro_batches (see cifar_data.h).
#include "cifar_data.h"

#include <cstdio>

#include <kiln/core/error.h>

namespace kiln::apps {

std::pair<data::Cifar10Dataset, data::Cifar10Dataset> load_cifar_splits(const CifarDataOptions& o, bool announce) {
  data::Cifar10Dataset train, test;
  if (o.data_dir.empty() || o.synthetic) {
    if (announce) std::printf("%s\n", data::kSyntheticCifarNotice);
    train = data::make_synthetic_cifar10(data::SyntheticCifarOptions(o.train_size ? o.train_size : 50000).seed(1));
    test = data::make_synthetic_cifar10(data::SyntheticCifarOptions(o.test_size ? o.test_size : 10000).seed(2));
    return {train, test};
  }
  train = data::load_cifar10(o.data_dir, data::Cifar10Split::train);
  test = data::load_cifar10(o.data_dir, data::Cifar10Split::test);
  KILN_CHECK(o.train_size <= train.size(), "--train-size ", o.train_size, " exceeds the ", train.size(), " training images");
  KILN_CHECK(o.test_size <= test.size(), "--test-size ", o.test_size, " exceeds the ", test.size(), " test images");
  if (o.train_size) train = data::slice(train, 0, o.train_size);
  if (o.test_size) test = data::slice(test, 0, o.test_size);
  return {train, test};
}

std::vector<int64_t> interleave_micro_batches(const std::vector<int64_t>& indices, int64_t batch, int64_t accum) {
  if (accum == 1) return indices;
  std::vector<int64_t> out(indices.size());
  const int64_t micro = batch / accum;
  for (int64_t start = 0; start + batch <= int64_t(indices.size()); start += batch)
    for (int64_t i = 0; i < batch; ++i) out[start + (i % accum) * micro + i / accum] = indices[start + i];
  for (int64_t i = int64_t(indices.size()) / batch * batch; i < int64_t(indices.size()); ++i) out[i] = indices[i];
  return out;
}

}  // namespace kiln::apps
