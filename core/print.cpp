// Printing tensors the way torch does: nested brackets, long dims elided with "...".
#include <cmath>
#include <cstdio>
#include <sstream>

#include <kiln/core/ops/common.h>
#include <kiln/core/tensor.h>

namespace kiln {

namespace {

constexpr int64_t kEdgeItems = 3;     // shown at each end of a long dim
constexpr int64_t kSummarizeOver = 1000;  // elements before eliding

std::string format_value(double v, DType dt) {
  char buf[64];
  if (dt == DType::b8) return v != 0 ? "True" : "False";
  if (!is_floating(dt)) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  } else if (std::isnan(v)) {
    return "nan";
  } else if (std::isinf(v)) {
    return v > 0 ? "inf" : "-inf";
  } else {
    std::snprintf(buf, sizeof buf, "%.4f", v);
    if (std::fabs(v) >= 1e6 || (v != 0 && std::fabs(v) < 1e-4)) std::snprintf(buf, sizeof buf, "%.4e", v);
  }
  return buf;
}

void print_dim(std::ostream& os, const Tensor& t, DType dt, const double* data, const Strides& st, int64_t dim,
               int64_t offset, bool summarize, int indent) {
  int64_t n = t.shape()[dim];
  os << '[';
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << (dim + 1 == t.dim() ? "..., " : "...,\n" + std::string(indent + 1, ' '));
      i = n - kEdgeItems;
    }
    if (dim + 1 == t.dim())
      os << format_value(data[offset + i * st[dim]], dt);
    else
      print_dim(os, t, dt, data, st, dim + 1, offset + i * st[dim], summarize, indent + 1);
    if (i + 1 < n) os << (dim + 1 == t.dim() ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << ']';
}

}  // namespace

std::string Tensor::str() const {
  std::ostringstream os;
  if (!defined()) return "tensor(undefined)";
  ops::check_in_storage(*this, "print", "tensor");  // Note [Reads within the storage]
  Tensor c = to(Device::cpu()).to(DType::f64).contiguous();
  const double* data = static_cast<const double*>(c.data_ptr());
  os << "tensor(";
  if (dim() == 0)
    os << format_value(data[0], dtype());
  else if (numel() == 0)
    os << "[]";
  else
    print_dim(os, c, dtype(), data, c.strides(), 0, 0, numel() > kSummarizeOver, 7);
  os << ", shape=" << shape() << ", dtype=" << dtype();
  if (!device().is_cpu()) os << ", device=" << device();
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace kiln
