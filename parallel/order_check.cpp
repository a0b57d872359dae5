// The collective-order check of DDP's reducer: this rank's codes into each bucket's tail before
// the all-reduce, and after it every rank's codes compared with this rank's, on the host or
// (Note [Deferred order check]) on the device, read later.
#include <kiln/parallel/order_check.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include <kiln/autograd/grad_mode.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/core/ops/join.h>
#include <kiln/core/ops/reduce.h>
#include <kiln/parallel/bucket.h>
#include <kiln/parallel/debug_level.h>

namespace kiln::dist {

// Note [Bucket order check]
// Every rank must all-reduce the same buckets in the same order; if one rank issues an extra
// collective (or skips one), rank A's bucket 3 gets summed with rank B's bucket 4 and training goes
// silently wrong. So each bucket's flat tensor carries a tail after the gradients: 3 slots per
// rank, (iteration, bucket index, group sequence number). A rank writes its codes into its own 3
// slots and zeros elsewhere, so after the SUM every rank can read every other rank's codes and
// compare them with its own: any difference means the ranks reduced different things, and the
// reducer throws naming the bucket, the iteration and the sequence numbers on both sides. A slot
// holds an integer below the largest the dtype holds exactly (2^8 for bf16, 2^11 for f16, 2^24
// for f32, 2^52 for f64), since x + 0 is exact in every floating format; so each code is written
// as base-2^k digits over several slots (6 for bf16, 4 for f16, 2 for f32, 1 for f64), covering
// at least 2^44 iterations, buckets and sequence numbers: codes never wrap, so ranks 256
// iterations apart do not look alike in a bf16 bucket. The check costs no extra collective. With
// find_unused_parameters the tail also carries one counter per parameter of the bucket (1 where
// this rank used it), so after the sum a zero means no rank did. A comm hook sees only the
// gradients, so with one the tail travels in a separate small f64 all-reduce launched just
// before the hook's collectives.
//
// Note [Deferred order check]
// Reading the tails on the host at the end of backward would synchronize a CUDA device every step
// (the host then cannot queue the optimizer step and the next forward while the GPU finishes). So
// the tails are read (all buckets in one copy) only when it is free or needed, and otherwise
// compared on the device:
//   - read, every iteration: on the CPU; with find_unused_parameters (the host needs the counters,
//     as torch's reducer copies its local_used_map to the host); with OrderCheck::every_iteration
//     or KILN_DISTRIBUTED_DEBUG (or TORCH_DISTRIBUTED_DEBUG) set to INFO or DETAIL;
//   - read, on CUDA by default (OrderCheck::automatic): the first two synced iterations, i.e. the
//     first with the initial buckets and the first with the buckets rebuilt in arrival order, which
//     is where ranks that run different models or control flow part ways (torch checks its
//     parameters and buckets at the start, and every collective only under
//     TORCH_DISTRIBUTED_DEBUG=DETAIL);
//   - otherwise compared on the device: a few small kernels per iteration compare every rank's
//     slots with this rank's codes, count the slots that differ, and keep the codes of the first
//     iteration that had a difference. check_collective_order() reads the count (one host read) and
//     fails with the same message as the immediate check, naming that iteration. The Trainer calls
//     it on log steps (which read the loss anyway) and before each checkpoint, the reducer before
//     it rebuilds its buckets, and the destructor logs a difference it finds. So every iteration
//     is still checked, but a mismatch is reported at the next of those points, not at once.

namespace {

constexpr int64_t kCodes = 3;  // iteration, bucket, sequence number

// The digit base (largest exactly held integer) and digits per code for a tail of `dtype`.
struct Digits {
  double base;
  int count;
};
Digits code_digits(DType dtype) {
  switch (dtype) {
    case DType::bf16: return {256.0, 6};
    case DType::f16: return {2048.0, 4};
    case DType::f32: return {16777216.0, 2};
    default: return {4503599627370496.0, 1};  // 2^52
  }
}

// `code` as code_digits(dtype).count digits, least significant first, appended to `out`.
void encode(uint64_t code, DType dtype, double* out) {
  const Digits d = code_digits(dtype);
  const auto base = static_cast<uint64_t>(d.base);
  for (int k = 0; k < d.count; ++k) {
    out[k] = double(code % base);
    code /= base;
  }
}

uint64_t decode(const double* digits, DType dtype) {
  const Digits d = code_digits(dtype);
  uint64_t code = 0;
  for (int k = d.count; k-- > 0;) code = code * static_cast<uint64_t>(d.base) + static_cast<uint64_t>(digits[k]);
  return code;
}

int64_t codes_per_rank(DType dtype) { return kCodes * code_digits(dtype).count; }

// KILN_DISTRIBUTED_DEBUG (else TORCH_DISTRIBUTED_DEBUG) is INFO or DETAIL (debug_level.h).
bool distributed_debug() { return debug_level() != DebugLevel::off; }

// The order-check failure for bucket `b` as this rank reduced it (iteration, sequence number, the
// dtype whose digits the codes use), given the code slots of every rank after the sum; "" when
// every rank's slots hold this rank's codes.
std::string order_mismatch(const double* got, int rank, int size, size_t b, int64_t iteration, uint64_t sequence,
                           DType dtype) {
  const int64_t n = codes_per_rank(dtype), per = n / kCodes;
  std::vector<double> mine(size_t(n), 0.0);
  encode(uint64_t(iteration), dtype, &mine[0]);
  encode(uint64_t(b), dtype, &mine[size_t(per)]);
  encode(sequence, dtype, &mine[size_t(2 * per)]);
  // The other ranks first: their slots say what they reduced. Our own slot can only differ when
  // someone contributed a tensor that is not a bucket (its "zeros" were data).
  for (int k = 1; k <= size; ++k) {
    int r = (rank + k) % size;
    const double* slots = &got[size_t(r * n)];
    if (std::equal(mine.begin(), mine.end(), slots)) continue;
    const uint64_t theirs[kCodes] = {decode(slots, dtype), decode(slots + per, dtype), decode(slots + 2 * per, dtype)};
    std::ostringstream os;
    os << "DistributedDataParallel: collective order mismatch (Note [Bucket order check]): rank " << rank
       << " all-reduced bucket " << b << " of iteration " << iteration << " as collective sequence number "
       << sequence << ", but ";
    if (r != rank)
      os << "rank " << r << " contributed bucket " << theirs[1] << " of iteration " << theirs[0]
         << " at sequence number " << theirs[2];
    else
      os << "another rank contributed a tensor that is not a DDP bucket (this rank's own check slot reads bucket "
         << theirs[1] << " of iteration " << theirs[0] << ")";
    os << "; every rank must issue the same collectives in the same order (an extra or missing all-reduce, "
          "barrier or broadcast on one rank, or a different model or control flow)";
    return os.str();
  }
  return "";
}

}  // namespace

OrderChecker::OrderChecker(int rank, int world_size, OrderCheck mode)
    : rank_(rank), world_size_(world_size), mode_(mode), debug_(distributed_debug()) {}

int64_t OrderChecker::slots(DType dtype) const { return codes_per_rank(dtype) * world_size_; }

void OrderChecker::reset(size_t bucket_count) {
  KILN_ASSERT(pending_ == 0, "the order check's deferred record of ", pending_,
              " iteration(s) was not read before the buckets changed");
  sequence_.assign(bucket_count, 0);
  dtype_.assign(bucket_count, DType::f64);
  mismatched_slots_ = first_mismatch_ = Tensor();
}

void OrderChecker::write_codes(std::vector<double>& tail, size_t b, int64_t iteration, uint64_t sequence,
                               DType dtype) {
  KILN_ASSERT(int64_t(tail.size()) >= slots(dtype), "a bucket tail of ", tail.size(), " values for ",
              slots(dtype), " order-check slots");
  KILN_ASSERT(iteration >= 0, "negative iteration ", iteration);
  sequence_[b] = sequence;
  dtype_[b] = dtype;
  const int64_t n = codes_per_rank(dtype), per = n / kCodes;
  double* mine = &tail[size_t(rank_ * n)];
  encode(uint64_t(iteration), dtype, mine);
  encode(uint64_t(b), dtype, mine + per);
  encode(sequence, dtype, mine + 2 * per);
}

bool OrderChecker::read_on_host(int64_t iteration, bool on_cuda) const {
  switch (mode_) {
    case OrderCheck::every_iteration: return true;
    case OrderCheck::deferred: return false;
    case OrderCheck::automatic: break;
  }
  return debug_ || !on_cuda || iteration <= 2;
}

std::string OrderChecker::mismatch(size_t b, const std::vector<double>& tail, int64_t iteration) const {
  return order_mismatch(tail.data(), rank_, world_size_, b, iteration, sequence_[b], dtype_[b]);
}

void OrderChecker::check(const std::vector<std::vector<double>>& tails, int64_t iteration) {
  ++host_checks_;
  for (size_t b = 0; b < tails.size(); ++b) {
    std::string why = mismatch(b, tails[b], iteration);
    if (!why.empty()) throw DistributedError(why);
  }
}

// The comparison on the device. `reference` holds, per bucket, the slots every rank should have
// written (this rank's codes, world size times), then per bucket this rank's exact (iteration,
// bucket, sequence number) for the message.
void OrderChecker::defer(const std::vector<Tensor>& tails, int64_t iteration) {
  KILN_ASSERT(!tails.empty(), "the deferred order check needs at least one bucket");
  KILN_ASSERT(tails.size() == dtype_.size(), tails.size(), " tails for ", dtype_.size(), " buckets");
  const auto nb = static_cast<int64_t>(tails.size());
  std::vector<Tensor> got;
  std::vector<double> reference;
  int64_t total = 0;  // code slots of all buckets
  for (int64_t b = 0; b < nb; ++b) {
    const DType dtype = dtype_[size_t(b)];  // the digits were written for it (a hook's tail is f64)
    const int64_t w = slots(dtype), n = codes_per_rank(dtype), per = n / kCodes;
    got.push_back(tails[size_t(b)].narrow(0, 0, w).to(DType::f64));
    std::vector<double> mine(static_cast<size_t>(n), 0.0);
    encode(uint64_t(iteration), dtype, &mine[0]);
    encode(uint64_t(b), dtype, &mine[size_t(per)]);
    encode(sequence_[size_t(b)], dtype, &mine[size_t(2 * per)]);
    for (int r = 0; r < world_size_; ++r) reference.insert(reference.end(), mine.begin(), mine.end());
    total += w;
  }
  for (int64_t b = 0; b < nb; ++b)
    for (double v : {double(iteration), double(b), double(sequence_[size_t(b)])}) reference.push_back(v);
  const Device device = tails.front().device();
  Tensor ref = host_values(reference, device).to(device, /*non_blocking=*/true);
  Tensor actual = ops::cat(got, 0);                                              // (total)
  Tensor record = ops::cat({actual, ref.narrow(0, total, nb * kCodes)}, 0);      // what the message needs
  Tensor differ = ops::sum(ops::ne(actual, ref.narrow(0, 0, total)).to(DType::f64));
  if (!mismatched_slots_.defined()) {
    mismatched_slots_ = zeros({}, TensorOptions(DType::f64).device(device));
    first_mismatch_ = zeros(record.shape(), TensorOptions(DType::f64).device(device));
  }
  // The first iteration with a difference keeps its record.
  Tensor first = ops::gt(ops::mul(differ, ops::eq(mismatched_slots_, 0.0).to(DType::f64)), 0.0);
  first_mismatch_ = ops::where(first, record, first_mismatch_);
  mismatched_slots_ = ops::add(mismatched_slots_, differ);
  ++pending_;
  ++deferred_checks_;
}

std::string OrderChecker::read_deferred(int64_t iteration) {
  if (pending_ == 0) return "";
  const int64_t checked = pending_;
  pending_ = 0;
  NoGradGuard no_grad;
  if (mismatched_slots_.item() == 0.0) return "";  // the one host read
  const std::vector<double> record = first_mismatch_.to_vector<double>();
  const size_t nb = sequence_.size();
  size_t total = 0;
  for (DType dtype : dtype_) total += size_t(slots(dtype));
  KILN_ASSERT(record.size() == total + nb * size_t(kCodes), "deferred order check record of ", record.size(),
              " values for ", nb, " buckets");
  size_t at = 0;
  for (size_t b = 0; b < nb; ++b) {
    const double* mine = &record[total + b * kCodes];
    std::string why = order_mismatch(&record[at], rank_, world_size_, size_t(mine[1]), int64_t(mine[0]),
                                     uint64_t(mine[2]), dtype_[b]);
    at += size_t(slots(dtype_[b]));
    if (why.empty()) continue;
    std::ostringstream os;
    os << why << " (found by the deferred check on the device over the last " << checked
       << " iteration(s), read after iteration " << iteration
       << "; KILN_DISTRIBUTED_DEBUG=DETAIL checks every iteration as it ends: Note [Deferred order check])";
    return os.str();
  }
  KILN_UNREACHABLE("the deferred order check counted ", mismatched_slots_.item(),
              " differing slots but its record shows none");
  return "";
}

}  // namespace kiln::dist
