// The attention switch of kiln/cuda.h (KILN_ATTENTION=auto|cudnn|kiln, set_attention_backend): its
// parsing, the environment read once, the setter, and that CPU attention ignores it. Runs in every
// build; ctest runs it again with KILN_ATTENTION=cudnn and with a bad value (tests/CMakeLists.txt).
#include "test_util.h"

#include <cstdlib>
#include <string>

using namespace kiln;

// First in the file (doctest runs a file's cases in order): nothing has read the switch yet.
TEST_CASE("attention switch: the first read takes KILN_ATTENTION (unset: auto)") {
  const char* env = std::getenv("KILN_ATTENTION");
  const std::string value = env ? env : "";
  CAPTURE(value);
  if (value.empty()) {
    CHECK(cuda::attention_backend() == cuda::AttentionBackend::automatic);
  } else if (value == "auto" || value == "cudnn" || value == "kiln") {
    CHECK(cuda::attention_backend() == cuda::parse_attention_backend(value));
    CHECK(cuda::attention_backend_name(cuda::attention_backend()) == value);
  } else {
    // A bad value fails every read, naming itself, until the setter decides.
    const std::string got = "got '" + value + "'";
    CHECK_ERROR_CONTAINS(cuda::attention_backend(), "KILN_ATTENTION must be auto, cudnn or kiln", got.c_str());
    CHECK_ERROR_CONTAINS(cuda::attention_backend(), got.c_str());
    cuda::set_attention_backend(cuda::AttentionBackend::kiln);
    CHECK(cuda::attention_backend() == cuda::AttentionBackend::kiln);
  }
}

TEST_CASE("attention switch: parsing auto, cudnn and kiln; anything else is an error naming it") {
  CHECK(cuda::parse_attention_backend("auto") == cuda::AttentionBackend::automatic);
  CHECK(cuda::parse_attention_backend("cudnn") == cuda::AttentionBackend::cudnn);
  CHECK(cuda::parse_attention_backend("kiln") == cuda::AttentionBackend::kiln);
  for (cuda::AttentionBackend b :
       {cuda::AttentionBackend::automatic, cuda::AttentionBackend::cudnn, cuda::AttentionBackend::kiln})
    CHECK(cuda::parse_attention_backend(cuda::attention_backend_name(b)) == b);
  for (const char* bad : {"", "CUDNN", "flash", "cudnn ", "automatic"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(cuda::parse_attention_backend(bad), ValueError);
    const std::string got = std::string("got '") + bad + "'";
    CHECK_ERROR_CONTAINS(cuda::parse_attention_backend(bad), "KILN_ATTENTION must be auto, cudnn or kiln", got.c_str());
  }
}

TEST_CASE("attention switch: the setter wins over the environment") {
  const cuda::AttentionBackend before = cuda::attention_backend();
  for (cuda::AttentionBackend b :
       {cuda::AttentionBackend::cudnn, cuda::AttentionBackend::kiln, cuda::AttentionBackend::automatic}) {
    cuda::set_attention_backend(b);
    CHECK(cuda::attention_backend() == b);
  }
  cuda::set_attention_backend(before);
}

TEST_CASE("attention switch: CPU attention ignores it") {
  // The switch picks CUDA kernels only: with cudnn forced, CPU attention still runs (and matches).
  Tensor q = test::random({1, 2, 9, 64}, DType::f32, 3), k = test::random({1, 2, 9, 64}, DType::f32, 4),
         v = test::random({1, 2, 9, 64}, DType::f32, 5);
  const cuda::AttentionBackend before = cuda::attention_backend();
  cuda::set_attention_backend(cuda::AttentionBackend::kiln);
  const std::vector<double> reference = test::values(scaled_dot_product_attention(q, k, v, true));
  cuda::set_attention_backend(cuda::AttentionBackend::cudnn);
  Tensor out = scaled_dot_product_attention(q, k, v, true);
  cuda::set_attention_backend(before);
  CHECK(out.device() == Device::cpu());
  CHECK(test::values(out) == reference);
}
