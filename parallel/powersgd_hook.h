// PowerSGD gradient compression (Vogels et al. 2019; torch's powerSGD_hook): each gradient matrix
// M (n x m) of a bucket is replaced by a rank-r approximation P Q^T computed from two small
// all-reduces, of P (n x r) and Q (m x r), instead of the all-reduce of M. See Note [PowerSGD] in
// parallel/powersgd_hook.cpp, in the source tree.
#pragma once

#include <cstdint>
#include <map>

#include <kiln/core/arg.h>
#include <kiln/parallel/comm_hooks.h>

namespace kiln::dist {

/// Options of PowerSGD compression (torch's PowerSGDState arguments).
struct PowerSGDOptions {
  KILN_ARG(int, matrix_approximation_rank) = 1;  ///< r
  /// Iterations (synced backward passes) reduced by plain all-reduce first: the warm-up torch
  /// recommends, and the first two iterations (before and after the bucket rebuild) at least.
  KILN_ARG(int64_t, start_powerSGD_iter) = 1000;
  /// A matrix is compressed only when n * m > min_compression_rate * r * (n + m); the others (and
  /// every vector, e.g. biases) are all-reduced uncompressed, together.
  KILN_ARG(double, min_compression_rate) = 2;
  KILN_ARG(bool, use_error_feedback) = true;  ///< add what compression lost last time to the gradient
  KILN_ARG(bool, warm_start) = true;          ///< start each iteration's power step from the last Q
  KILN_ARG(double, orthogonalization_epsilon) = 0;  ///< added to column norms in Gram-Schmidt
  KILN_ARG(uint64_t, random_seed) = 0;              ///< initial Q (the same on every rank)
};

/// The hook's state (torch's PowerSGDState): per bucket, the error feedback and the P and Q
/// matrices; and the iteration count. One per DDP; kept by the registered hook.
class PowerSGDState {
 public:
  explicit PowerSGDState(PowerSGDOptions options = {});
  const PowerSGDOptions& options() const { return options_; }
  int64_t iteration() const { return iteration_; }
  /// Per bucket (undefined before the bucket was first compressed): the error feedback (the
  /// bucket's size), and P and Q of every compressed matrix back to back (flat).
  Tensor error(size_t bucket) const;
  Tensor p(size_t bucket) const;
  Tensor q(size_t bucket) const;
  /// Warm start for `bucket` from `q` (every compressed matrix's Q back to back, flat), as if an
  /// earlier iteration had left it (torch: writing state.q_memory_dict); it is orthogonalized
  /// before use. Replays a run, or another implementation's, with the same initial Q.
  void set_q(size_t bucket, Tensor q);
  /// Elements all-reduced by the last compressed iteration, and what plain all-reduce would send.
  int64_t sent_elements() const { return sent_; }
  int64_t dense_elements() const { return dense_; }

 private:
  friend std::shared_ptr<Work> powersgd_hook(PowerSGDState&, ProcessGroup&, GradBucket&);
  PowerSGDOptions options_;
  int64_t iteration_ = 0;
  std::map<size_t, Tensor> error_, p_, q_;
  int64_t sent_ = 0, dense_ = 0;
};

/// The hook: ddp.register_comm_hook(std::make_shared<PowerSGDState>(options), powersgd_hook).
std::shared_ptr<Work> powersgd_hook(PowerSGDState& state, ProcessGroup& group, GradBucket& bucket);

/// Gram-Schmidt on the columns of `m` (n x r), in place: column i is normalized (norm + epsilon;
/// a zero column stays zero), then removed from the columns after it.
void orthogonalize_columns(Tensor& m, double epsilon);
/// The columns of `m` (n x r, r <= n) replaced, in place, by the Q factor of its QR factorization
/// (Householder reflections, LAPACK's signs): orthonormal whatever `m` is, even rank deficient.
void orthonormalize_householder(Tensor& m);
/// What PowerSGD orthogonalizes P and Q with, as torch's _orthogonalize: Gram-Schmidt for r <= 2
/// and 16-bit matrices, Householder QR otherwise (Note [PowerSGD orthogonalization] in
/// parallel/powersgd_hook.cpp, in the source tree).
void orthogonalize(Tensor& m, double epsilon);

}  // namespace kiln::dist
