// Copies on and to the GPU against the CPU copy: every dtype pair (bool and 16-bit included),
// strided and offset views on either side, broadcast sources, overlapping source and
// destination, host <-> device staging, pinned non_blocking round trips, peer copies, fill_ on
// strided views, and 64-bit index math. Skipped (exit 77) without a device.
#include "test_util.h"

#include <cuda_runtime.h>

using namespace kiln;

namespace {

const DType kAll[] = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32, DType::u8, DType::b8};

// Values every dtype holds and every cast keeps in range: integers and halves in [0, 100) for the
// unsigned and bool cases, [-100, 100) otherwise.
Tensor source(const Shape& shape, DType dt, DType to, uint64_t seed) {
  bool non_negative = dt == DType::u8 || dt == DType::b8 || to == DType::u8 || to == DType::b8;
  Tensor x = test::random(shape, DType::f64, seed, non_negative ? 0.0 : -100.0, 100.0);
  // Some exact zeros (bool false) and fractions (casts to integers truncate).
  double* p = x.data<double>();
  for (int64_t i = 0; i < x.numel(); i += 7) p[i] = 0.0;
  for (int64_t i = 3; i < x.numel(); i += 5) p[i] = std::floor(p[i]) + 0.5;
  return x.to(dt);
}

std::string pair_name(DType d, DType s) { return std::string(dtype_name(s)) + " -> " + dtype_name(d); }

// Exactly equal values (casts are deterministic; NaN never appears here).
void check_equal(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  REQUIRE_MESSAGE(gpu.device().is_cuda(), what);
  CHECK_MESSAGE(gpu.dtype() == cpu.dtype(), what);
  test::check_close(test::values(gpu), test::values(cpu), 0.0, 0.0, what);
}

}  // namespace

TEST_CASE("contiguous casts on the device match the CPU in every dtype pair") {
  test::require_cuda();
  for (DType d : kAll)
    for (DType s : kAll) {
      for (const Shape& shape : {Shape{1}, Shape{257, 31}, Shape{300001}}) {
        Tensor x = source(shape, s, d, 11);
        Tensor gpu = x.to(Device::cuda()).to(d);
        check_equal(gpu, x.to(d), pair_name(d, s) + " contiguous");
      }
    }
}

TEST_CASE("strided and offset views on either side match the CPU in every dtype pair") {
  test::require_cuda();
  for (DType d : kAll)
    for (DType s : kAll) {
      Tensor x = source({37, 53}, s, d, 12);
      const std::string what = pair_name(d, s);
      // Transposed source into a contiguous destination.
      Tensor xs = test::to_cuda(x, /*strided=*/true);
      REQUIRE(!xs.is_contiguous());
      Tensor out = test::poisoned({37, 53}, d);
      out.copy_(xs);
      check_equal(out, x.to(d), what + " strided source");
      // Sliced (offset, step 2) source into a transposed destination view.
      Tensor xd = x.to(Device::cuda());
      Tensor src = xd.slice(0, 1, 37, 2).slice(1, 3, 50);
      Tensor dst_full = test::poisoned({47, 18}, d);
      Tensor dst = dst_full.t();  // (18, 47) view
      dst.copy_(src);
      Tensor ref_full = zeros({47, 18}, d);
      ref_full.fill_(is_floating(d) ? std::nan("") : (d == DType::b8 ? 1.0 : 90.0));
      ref_full.t().copy_(x.slice(0, 1, 37, 2).slice(1, 3, 50));
      test::check_close(test::values(dst_full), test::values(ref_full), 0.0, 0.0, what + " into a strided view");
      // The same through clone() and contiguous().
      check_equal(src.clone(), x.slice(0, 1, 37, 2).slice(1, 3, 50).clone(), what + " clone");
      check_equal(xs.contiguous().to(d), x.to(d), what + " contiguous()");
    }
}

TEST_CASE("broadcast sources (stride 0) fill every destination element") {
  test::require_cuda();
  for (DType d : {DType::f32, DType::bf16, DType::i64, DType::b8})
    for (DType s : {DType::f64, DType::f16, DType::i32, DType::u8}) {
      const std::string what = pair_name(d, s);
      for (const Shape& from : {Shape{1, 53}, Shape{37, 1}, Shape{}, Shape{53}}) {
        Tensor x = source(from, s, d, 13);
        Tensor out = test::poisoned({37, 53}, d);
        out.copy_(x.to(Device::cuda()));
        Tensor ref = empty({37, 53}, d);
        ref.copy_(x);
        check_equal(out, ref, what + " broadcast device -> device");
        // Host -> device and device -> host with a broadcast source.
        Tensor out2 = test::poisoned({37, 53}, d);
        out2.copy_(x);
        check_equal(out2, ref, what + " broadcast host -> device");
        Tensor host = empty({37, 53}, d);
        host.copy_(x.to(Device::cuda()).expand({37, 53}));
        test::check_close(test::values(host), test::values(ref), 0, 0, what + " broadcast device -> host");
      }
    }
}

TEST_CASE("overlapping source and destination on the device behave like the CPU (source cloned first)") {
  test::require_cuda();
  for (DType dt : {DType::f32, DType::i64, DType::bf16}) {
    Tensor cpu = arange(100, dt);
    Tensor gpu = cpu.to(Device::cuda());
    cpu.slice(0, 1, 100).copy_(cpu.slice(0, 0, 99));
    gpu.slice(0, 1, 100).copy_(gpu.slice(0, 0, 99));
    check_equal(gpu, cpu, std::string("shift right, ") + dtype_name(dt));
    Tensor cpu2 = arange(64, dt).view({8, 8});
    Tensor gpu2 = cpu2.to(Device::cuda());
    cpu2.copy_(cpu2.t());
    gpu2.copy_(gpu2.t());
    check_equal(gpu2, cpu2, std::string("in-place transpose, ") + dtype_name(dt));
  }
}

TEST_CASE("host <-> device copies with strides and casts on both sides") {
  test::require_cuda();
  for (DType d : {DType::f32, DType::f16, DType::i32, DType::b8})
    for (DType s : {DType::f64, DType::bf16, DType::u8}) {
      const std::string what = pair_name(d, s);
      Tensor x = source({29, 41}, s, d, 14);
      // Strided host source into a strided device destination, with a cast.
      Tensor dev_full = test::poisoned({41, 29}, d);
      dev_full.t().copy_(x.t().contiguous().t());  // x's values through a strided host view
      check_equal(dev_full.t().contiguous(), x.to(d), what + " host (strided) -> device (strided)");
      // Strided device source into a strided host destination, with a cast.
      Tensor host_full = zeros({41, 29}, d);
      host_full.t().copy_(test::to_cuda(x, true));
      test::check_close(test::values(host_full.t()), test::values(x.to(d)), 0, 0, what + " device -> host (strided)");
      // to(Device) both ways.
      check_equal(x.slice(1, 2, 40, 3).to(Device::cuda()).to(d), x.slice(1, 2, 40, 3).to(d), what + " to(cuda)");
      Tensor back = test::to_cuda(x, true).to(Device::cpu());
      CHECK(back.device().is_cpu());
      test::check_close(test::values(back), test::values(x), 0, 0, what + " to(cpu)");
    }
}

TEST_CASE("pinned non_blocking round trip, and blocking semantics without pinned memory") {
  test::require_cuda();
  Tensor x = test::random({1 << 20, 3}, DType::f32, 15);
  Tensor pinned = x.pin_memory();
  Tensor d = pinned.to(Device::cuda(), /*non_blocking=*/true);
  Tensor back = d.to(Device::cpu(), /*non_blocking=*/true);
  CHECK(back.is_pinned());  // a non-blocking download lands in pinned memory
  cuda::current_stream().synchronize();
  CHECK(test::values(back) == test::values(x));

  // Freeing the pinned source while its upload may be in flight cannot corrupt the upload: the
  // block is not handed out again until the copy is done.
  Tensor src = x.pin_memory();
  Tensor d2 = empty({1 << 20, 3}, DType::f32, Device::cuda());
  d2.copy_(src, /*non_blocking=*/true);
  src = Tensor();
  Tensor scribble = empty({1 << 20, 3}, TensorOptions().pinned_memory());
  scribble.fill_(-1.0);
  cuda::current_stream().synchronize();
  CHECK(test::values(d2) == test::values(x));

  // Pageable memory: non_blocking is ignored, so the host buffer may change right after.
  Tensor pageable = x.clone();
  Tensor d3 = pageable.to(Device::cuda(), /*non_blocking=*/true);
  pageable.fill_(0.0);
  CHECK(test::values(d3) == test::values(x));
  Tensor host = empty({1 << 20, 3});
  host.copy_(d3, /*non_blocking=*/true);  // must be complete on return
  CHECK(test::values(host) == test::values(x));

  // Strided pinned source, non-blocking, with a cast.
  Tensor ps = x.pin_memory();
  Tensor d4 = test::poisoned({3, 1 << 20}, DType::bf16);
  d4.copy_(ps.t(), /*non_blocking=*/true);
  cuda::current_stream().synchronize();
  check_equal(d4, x.t().to(DType::bf16), "strided pinned -> bf16 device");
}

TEST_CASE("copies between two devices") {
  test::require_cuda();
  if (cuda::device_count() < 2) {
    MESSAGE("one device only: peer copies are not exercised");
    return;
  }
  Tensor x = test::random({301, 77}, DType::f32, 16);
  Tensor a = x.to(Device::cuda(0));
  Tensor b = a.to(Device::cuda(1));
  CHECK(b.device() == Device::cuda(1));
  CHECK(test::values(b) == test::values(x));
  // Strided, cast, broadcast across devices.
  Tensor c = test::poisoned({77, 301}, DType::bf16, Device::cuda(1));
  c.copy_(a.t());
  check_equal(c, x.t().to(DType::bf16), "cuda:0 (strided f32) -> cuda:1 (bf16)");
  Tensor e = test::poisoned({301, 77}, DType::f64, Device::cuda(0));
  e.t().copy_(b.t());
  check_equal(e, x.to(DType::f64), "cuda:1 -> strided cuda:0");
  Tensor row = x.slice(0, 0, 1).to(Device::cuda(1));
  Tensor f = test::poisoned({301, 77}, DType::f32, Device::cuda(0));
  f.copy_(row);
  check_equal(f, x.slice(0, 0, 1).expand({301, 77}).contiguous(), "broadcast cuda:1 -> cuda:0");
  cuda::set_device(0);
}

TEST_CASE("fill_ on strided, offset and broadcast-shaped CUDA views matches the CPU") {
  test::require_cuda();
  for (DType dt : kAll) {
    Tensor cpu = empty({40, 30}, dt);
    cpu.fill_(7.0);
    Tensor gpu = cpu.to(Device::cuda());
    for (Tensor* t : {&cpu, &gpu}) {
      t->t().slice(0, 1, 30, 3).fill_(2.5);     // every third column from the second
      t->slice(0, 5, 40, 7).slice(1, 2, 9).fill_(dt == DType::u8 ? 5.0 : -1.0);  // u8 cannot hold -1
      t->select(1, 29).fill_(1.0);
    }
    check_equal(gpu, cpu, std::string("strided fill ") + dtype_name(dt));
  }
  // Many blocks, odd size, a strided view covering everything.
  Tensor big = zeros({3001, 1001}, TensorOptions(DType::f32).device(Device::cuda()));
  big.t().fill_(0.25);
  CHECK(test::values(big) == std::vector<double>(3001 * 1001, 0.25));
}

TEST_CASE("strided copies whose offsets pass 2^31 use 64-bit index math") {
  test::require_cuda();
  const int64_t stride = (int64_t(1) << 31) + 1;  // the second element's offset is past 2^31 - 1
  Tensor big = zeros({stride + 4096}, TensorOptions(DType::u8).device(Device::cuda()));
  big.narrow(0, 0, 1).fill_(10.0);
  big.narrow(0, stride, 1).fill_(11.0);
  Tensor view = big.as_strided({2}, {stride}, 0);
  Tensor out = view.to(DType::i32);  // strided cast kernel, int64 offsets
  CHECK(test::values(out) == std::vector<double>{10, 11});
  Tensor same = view.clone();  // strided same-dtype kernel
  CHECK(test::values(same) == std::vector<double>{10, 11});
  Tensor back = zeros({2}, TensorOptions(DType::u8).device(Device::cuda()));
  view.copy_(back);  // and as the destination
  CHECK(test::values(big.narrow(0, stride, 1)) == std::vector<double>{0});
}
