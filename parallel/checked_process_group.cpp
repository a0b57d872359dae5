// KILN_DISTRIBUTED_DEBUG=DETAIL: each collective is described in kSlots int64 values, all-gathered
// through the wrapped group and compared with rank 0's before the collective itself is issued.
#include <kiln/parallel/checked_process_group.h>

#include <cstdio>
#include <sstream>
#include <vector>

#include <kiln/core/factory.h>

namespace kiln::dist {

namespace {

// seq, kind, op, root, dtype, numel, ndim, then up to kMaxDims dims (ndim > kMaxDims: the rest are
// folded into numel, which is still compared).
constexpr int64_t kMaxDims = 8, kSlots = 7 + kMaxDims;

const char* kind_name(int64_t k) {
  static const char* names[] = {"?", "allreduce", "broadcast", "allgather", "reduce_scatter", "barrier"};
  return k >= 1 && k <= 5 ? names[k] : names[0];
}
const char* op_name(int64_t o) {
  static const char* names[] = {"sum", "avg", "max", "min"};
  return o >= 0 && o <= 3 ? names[o] : "?";
}

std::string describe(const int64_t* d) {
  std::ostringstream os;
  os << "collective #" << d[0] << " " << kind_name(d[1]);
  if (d[1] == 1 || d[1] == 4) os << "(" << op_name(d[2]) << ")";
  if (d[1] == 2) os << "(root " << d[3] << ")";
  if (d[1] != 5) {
    os << " of " << d[5] << " " << (d[4] >= 0 && d[4] < kDTypeCount ? dtype_name(DType(d[4])) : "?") << " [";
    for (int64_t i = 0; i < std::min(d[6], kMaxDims); ++i) os << (i ? ", " : "") << d[7 + i];
    os << (d[6] > kMaxDims ? ", ...]" : "]");
  }
  return os.str();
}

}  // namespace

CheckedProcessGroup::CheckedProcessGroup(std::shared_ptr<ProcessGroup> inner)
    : ProcessGroup(inner ? inner->rank() : 0, inner ? inner->size() : 1), inner_(std::move(inner)) {
  KILN_CHECK(inner_ != nullptr, "CheckedProcessGroup: the wrapped process group is null");
}

void CheckedProcessGroup::check(Kind kind, const Tensor* tensor, int root, ReduceOp op) {
  std::vector<int64_t> mine(size_t(kSlots), 0);
  mine[0] = int64_t(next_sequence_number());
  mine[1] = int64_t(kind);
  mine[2] = int64_t(op);
  mine[3] = root;
  mine[4] = -1;
  if (tensor && tensor->defined()) {
    mine[4] = int64_t(tensor->dtype());
    mine[5] = tensor->numel();
    mine[6] = tensor->dim();
    for (int64_t i = 0; i < std::min<int64_t>(tensor->dim(), kMaxDims); ++i) mine[size_t(7 + i)] = tensor->size(i);
  }
  if (kind != Kind::allreduce && kind != Kind::reduce_scatter) mine[2] = 0;
  if (kind != Kind::broadcast) mine[3] = 0;
  ++checked_;
  if (size() == 1) return;
  const Device dev = inner_->device();
  Tensor local = from_vector(mine, {kSlots}).to(dev);
  Tensor all = zeros({kSlots * size()}, TensorOptions(DType::i64).device(dev));
  inner_->allgather(all, local)->wait();
  const std::vector<int64_t> got = all.to_vector<int64_t>();
  for (int r = 1; r < size(); ++r) {
    const int64_t* a = got.data();
    const int64_t* b = got.data() + r * kSlots;
    bool same = true;
    for (int64_t i = 0; i < kSlots; ++i) same = same && a[i] == b[i];
    KILN_CHECK_DIST(same, "collective mismatch (KILN_DISTRIBUTED_DEBUG=DETAIL) on ", inner_->backend(), ": rank 0 issued ",
                    describe(a), " but rank ", r, " issued ", describe(b), "; every rank must issue the same "
                    "collectives in the same order (this rank is ", rank(), ")");
  }
}

std::shared_ptr<Work> CheckedProcessGroup::allreduce(Tensor& tensor, const AllreduceOptions& options) {
  check(Kind::allreduce, &tensor, 0, options.op_);
  return inner_->allreduce(tensor, options);
}
std::shared_ptr<Work> CheckedProcessGroup::broadcast(Tensor& tensor, int root) {
  check(Kind::broadcast, &tensor, root, ReduceOp::sum);
  return inner_->broadcast(tensor, root);
}
std::shared_ptr<Work> CheckedProcessGroup::allgather(Tensor& output, const Tensor& input) {
  check(Kind::allgather, &input, 0, ReduceOp::sum);
  return inner_->allgather(output, input);
}
std::shared_ptr<Work> CheckedProcessGroup::reduce_scatter(Tensor& output, const Tensor& input,
                                                          const AllreduceOptions& options) {
  check(Kind::reduce_scatter, &input, 0, options.op_);
  return inner_->reduce_scatter(output, input, options);
}
std::shared_ptr<Work> CheckedProcessGroup::barrier() {
  check(Kind::barrier, nullptr, 0, ReduceOp::sum);
  return inner_->barrier();
}

}  // namespace kiln::dist
