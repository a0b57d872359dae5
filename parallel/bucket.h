// Gradient buckets for DistributedDataParallel: which parameters share one flat all-reduce buffer,
// and the buffer itself. Assignment is a pure function (sizes, dtypes, caps -> groups) so it can be
// tested without processes; the Reducer (reducer.h) owns the buckets and fills them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <kiln/core/tensor.h>

namespace kiln::dist {

/// Note [Bucket views]
/// A bucket is one flat contiguous tensor holding the gradients of several parameters back to back
/// (the order of `params`), followed by a short tail the reducer uses for Note [Bucket order check] in
/// parallel/order_check.cpp, in the source tree. Without gradient_as_bucket_view the reducer copies each
/// .grad into its slice when the parameter's gradient is final, all-reduces the bucket, and copies the
/// average back into .grad: two copies per step. With gradient_as_bucket_view each parameter's .grad IS its
/// slice (set_grad with a view of the flat tensor, reshaped to the parameter), and AccumulateGrad adds into
/// an existing .grad in place (autograd/node.cpp), so backward writes straight into the bucket and the
/// averaged result is already the .grad: no copies at all. If .grad is replaced or cleared
/// (zero_grad(set_to_none)), the next gradient lands in a fresh tensor; the reducer notices (the data pointer
/// is not its slice), copies it in once and re-installs the view. A parameter's slice never moves except when
/// the buckets are rebuilt after the first iteration, which re-installs every view.
struct Bucket {
  std::vector<size_t> params;    ///< indices into the reducer's parameter list, in bucket order
  std::vector<int64_t> offsets;  ///< element offset of each parameter's slice in `flat`
  std::vector<int64_t> lengths;  ///< numel of each parameter
  int64_t numel = 0;             ///< gradient elements (the tail comes after)
  Tensor flat;                   ///< (numel + tail) contiguous, the parameters' dtype and device

  /// The slice of parameter number `i` of this bucket, shaped like `shape`.
  Tensor slice(size_t i, const Shape& shape) const { return flat.narrow(0, offsets[i], lengths[i]).view(shape); }
  Tensor grads() const { return flat.narrow(0, 0, numel); }
};

/// Groups tensors into buckets. Tensors are visited in `order` (indices into `tensors`); each
/// (dtype, device) pair fills its own open bucket, which is closed once it holds at least its cap
/// in bytes: the first bucket of each pair is capped by `first_bucket_cap_bytes`, later ones by
/// `bucket_cap_bytes` (so a bucket may exceed its cap by its last tensor, and a tensor bigger than
/// the cap gets a bucket of its own). Buckets are returned ordered by their first tensor's position
/// in `order`, each listing tensor indices in visiting order. The DDP passes reverse registration
/// order (gradients of the last layers arrive first), then, after the first iteration, the order
/// in which gradients actually arrived.
std::vector<std::vector<size_t>> compute_bucket_assignment(const std::vector<Tensor>& tensors,
                                                           const std::vector<size_t>& order,
                                                           size_t first_bucket_cap_bytes, size_t bucket_cap_bytes);

/// `values` as a CPU f64 tensor to copy a bucket's tail from: in pinned memory when the bucket is on
/// a CUDA device, so the non-blocking copy does not wait.
Tensor host_values(const std::vector<double>& values, Device device);

/// Mebibytes (DDPOptions' unit) to bytes.
inline size_t mib_to_bytes(double mib) { return static_cast<size_t>(mib * 1024.0 * 1024.0); }

}  // namespace kiln::dist
