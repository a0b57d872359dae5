// PowerSGD: one power-iteration step per gradient matrix and iteration, with error feedback and
// warm start, as torch's powerSGD_hook computes it. Note [PowerSGD].
#include <kiln/parallel/powersgd_hook.h>

#include <algorithm>
#include <vector>

#include <kiln/autograd/grad_mode.h>
#include <kiln/core/factory.h>
#include <kiln/core/generator.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/core/ops/join.h>
#include <kiln/core/ops/matmul.h>
#include <kiln/core/ops/reduce.h>

namespace kiln::dist {

// Note [PowerSGD]
// Per bucket and iteration, with W ranks and rank r's gradient matrices M (n x m, a parameter's
// gradient viewed as (shape[0], rest)):
//   1. error feedback: M += E (what compression lost on this rank last time); keep a copy M0;
//   2. Q (m x r): the last iteration's Q (warm start), else random N(0, 1) from a generator seeded
//      by (random_seed, bucket, iteration), identical on every rank; either way orthogonalized;
//   3. P = M Q, all-reduced (summed): P = sum_ranks M Q; orthogonalize P's columns (Gram-Schmidt
//      for r <= 2, Householder QR above: Note [PowerSGD orthogonalization]);
//   4. Q = M^T P / W, all-reduced (summed): Q = mean_ranks(M)^T P  (divided before the sum);
//   5. M = P Q^T = P P^T mean(M): the projection of the average onto P's columns;
//   6. E = M0 - M (this rank's input minus the shared approximation).
// Vectors and matrices too small to gain (n m <= min_compression_rate r (n + m)) are averaged
// exactly in one extra all-reduce. Every matrix of the bucket shares the P and the Q all-reduce
// (flat buffers), so a bucket costs three collectives of sum r (n + m) + uncompressed elements
// instead of one of sum n m. The first start_powerSGD_iter iterations use the plain all-reduce;
// the iteration count advances at the bucket marked is_last. The P all-reduce is launched in the
// hook; steps 3 (orthogonalization) to 6 run when the reducer waits for the bucket (then_work),
// in bucket order on every rank, so the ranks' Q all-reduces pair up.

namespace {

struct Matrix {
  size_t k;          // parameter index in the bucket
  int64_t n, m, r;   // rows, columns, rank
  int64_t p_at, q_at;  // offsets in the flat P and Q
};

}  // namespace

PowerSGDState::PowerSGDState(PowerSGDOptions options) : options_(options) {
  KILN_CHECK(options_.matrix_approximation_rank_ >= 1, "PowerSGD: matrix_approximation_rank must be >= 1, got ",
             options_.matrix_approximation_rank_);
  KILN_CHECK(!(options_.use_error_feedback_ || options_.warm_start_) || options_.start_powerSGD_iter_ > 1,
             "PowerSGD: start_powerSGD_iter must be > 1 with use_error_feedback or warm_start (got ",
             options_.start_powerSGD_iter_, "): the buckets are rebuilt after the first iteration, and per-bucket "
             "state must not outlive that");
  KILN_CHECK(options_.min_compression_rate_ >= 0 && options_.orthogonalization_epsilon_ >= 0,
             "PowerSGD: min_compression_rate and orthogonalization_epsilon must be >= 0");
}

Tensor PowerSGDState::error(size_t bucket) const {
  auto it = error_.find(bucket);
  return it == error_.end() ? Tensor() : it->second;
}
Tensor PowerSGDState::p(size_t bucket) const {
  auto it = p_.find(bucket);
  return it == p_.end() ? Tensor() : it->second;
}
Tensor PowerSGDState::q(size_t bucket) const {
  auto it = q_.find(bucket);
  return it == q_.end() ? Tensor() : it->second;
}

void PowerSGDState::set_q(size_t bucket, Tensor q) {
  KILN_CHECK(q.defined() && q.dim() == 1, "PowerSGDState::set_q: expected a flat tensor for bucket ", bucket);
  q_[bucket] = q.contiguous().clone();
}

void orthogonalize_columns(Tensor& m, double epsilon) {
  KILN_CHECK(m.dim() == 2, "orthogonalize_columns: expected a matrix, got shape ", m.shape());
  NoGradGuard no_grad;
  const int64_t cols = m.size(1);
  for (int64_t i = 0; i < cols; ++i) {
    Tensor col = m.narrow(1, i, 1);
    Tensor norm = ops::sqrt(ops::sum(ops::mul(col, col)));
    // A zero column stays zero (torch divides by 0 and makes NaN when epsilon is 0).
    Tensor denom = ops::add(ops::add(norm, ops::eq(norm, 0.0).to(norm.dtype())), epsilon);
    col.copy_(ops::div(col, denom));
    for (int64_t j = i + 1; j < cols; ++j) {
      Tensor other = m.narrow(1, j, 1);
      other.copy_(ops::sub(other, ops::mul(ops::sum(ops::mul(col, other)), col)));
    }
  }
}

// Note [PowerSGD orthogonalization]
// Gram-Schmidt loses orthogonality on ill-conditioned or rank-deficient input: a column that is
// (nearly) in the span of the earlier ones leaves a residual of rounding noise, which it then
// normalizes to length 1, at an angle to the earlier columns of O(1). P then is no orthonormal
// basis, P P^T is no projection, and the "approximation" P P^T M can be larger than M; at full rank
// (r = min(n, m)) DDP drifted 0.05-5.5% from plain all-reduce that way. Torch uses Gram-Schmidt
// only for r <= 2 and 16-bit matrices and a QR factorization (Householder) otherwise; so do we:
// Householder reflections give orthonormal columns whatever the input, with span(result) holding
// the input's column space (A = Q R), so full-rank PowerSGD reproduces the average.
void orthonormalize_householder(Tensor& m) {
  KILN_CHECK(m.dim() == 2 && m.size(1) <= m.size(0), "orthonormalize_householder: expected a matrix (n, r) with r <= n, got shape ",
             m.shape());
  NoGradGuard no_grad;
  const int64_t n = m.size(0), r = m.size(1);
  const TensorOptions opts = TensorOptions(m.dtype()).device(m.device());
  Tensor a = m.clone();
  std::vector<Tensor> reflectors;  // unit v_j (n - j, 1) or zero: H_j = I - 2 v_j v_j^T on rows j..n
  for (int64_t j = 0; j < r; ++j) {
    Tensor x = a.narrow(0, j, n - j).narrow(1, j, 1);
    Tensor norm = ops::sqrt(ops::sum(ops::mul(x, x)));
    Tensor head = x.narrow(0, 0, 1);
    Tensor sign = ops::sub(ops::mul(ops::ge(head, 0.0).to(m.dtype()), 2.0), 1.0);  // LAPACK: sign(0) = +1
    Tensor v = x.clone();
    v.narrow(0, 0, 1).copy_(ops::add(head, ops::mul(sign, norm)));
    Tensor v_norm = ops::sqrt(ops::sum(ops::mul(v, v)));
    v = ops::div(v, ops::add(v_norm, ops::eq(v_norm, 0.0).to(m.dtype())));  // a zero column: H = I
    Tensor rest = a.narrow(0, j, n - j).narrow(1, j, r - j);
    rest.copy_(ops::sub(rest, ops::mul(ops::mm(v, ops::mm(v.t(), rest)), 2.0)));
    reflectors.push_back(v);
  }
  // Q = H_0 H_1 ... H_{r-1} applied to the first r columns of the identity, last reflector first.
  Tensor q = zeros({n, r}, opts);
  for (int64_t j = 0; j < r; ++j) q.narrow(0, j, 1).narrow(1, j, 1).fill_(1.0);
  for (int64_t j = r; j-- > 0;) {
    const Tensor& v = reflectors[size_t(j)];
    Tensor rows = q.narrow(0, j, n - j);
    rows.copy_(ops::sub(rows, ops::mul(ops::mm(v, ops::mm(v.t(), rows)), 2.0)));
  }
  m.copy_(q);
}

void orthogonalize(Tensor& m, double epsilon) {
  const bool half = m.dtype() == DType::f16 || m.dtype() == DType::bf16;
  if (m.size(1) <= 2 || half)
    orthogonalize_columns(m, epsilon);
  else
    orthonormalize_householder(m);
}

std::shared_ptr<Work> powersgd_hook(PowerSGDState& state, ProcessGroup& group, GradBucket& bucket) {
  const PowerSGDOptions& o = state.options_;
  if (state.iteration_ < o.start_powerSGD_iter_) {
    if (bucket.is_last) ++state.iteration_;
    return allreduce_hook(group, bucket);
  }
  NoGradGuard no_grad;
  const double world = group.size();
  const size_t b = bucket.index;
  Tensor input = bucket.buffer;
  const TensorOptions opts = TensorOptions(input.dtype()).device(input.device());

  // 1. Error feedback.
  Tensor input_copy;
  if (o.use_error_feedback_) {
    auto it = state.error_.find(b);
    if (it != state.error_.end() && it->second.numel() == input.numel())
      ops::add_(input, it->second);
    else
      state.error_[b] = zeros({input.numel()}, opts);
    input_copy = input.clone();
  }

  // Which gradients are compressed.
  std::vector<Matrix> mats;
  std::vector<size_t> plain;
  int64_t p_total = 0, q_total = 0;
  for (size_t k = 0; k < bucket.parameters.size(); ++k) {
    const Tensor& param = bucket.parameters[k];
    if (param.dim() <= 1 || param.numel() == 0) {
      plain.push_back(k);
      continue;
    }
    const int64_t n = param.size(0), m = param.numel() / n;
    const int64_t r = std::min<int64_t>({n, m, o.matrix_approximation_rank_});
    if (double(r * (n + m)) * o.min_compression_rate_ >= double(n * m)) {
      plain.push_back(k);
      continue;
    }
    mats.push_back({k, n, m, r, p_total, q_total});
    p_total += n * r;
    q_total += m * r;
  }

  // The uncompressed ones: averaged exactly, in one all-reduce.
  Tensor flat_plain;
  std::shared_ptr<Work> plain_work;
  int64_t plain_total = 0;
  if (!plain.empty()) {
    std::vector<Tensor> parts;
    for (size_t k : plain) parts.push_back(bucket.gradient(k).reshape({-1}));
    flat_plain = ops::cat(parts, 0);
    plain_total = flat_plain.numel();
    if (world > 1) ops::mul_(flat_plain, 1.0 / world);
    plain_work = group.allreduce(flat_plain, AllreduceOptions().op(ReduceOp::sum));
  }
  state.sent_ = plain_total + p_total + q_total;
  state.dense_ = input.numel();

  // 2. Q: warm start, or fresh random and orthogonalized.
  Tensor q = state.q(b);
  if (!o.warm_start_ || !q.defined() || q.numel() != q_total) {
    Generator gen(o.random_seed_ * 1000003ull + b * 7919ull + uint64_t(state.iteration_));
    q = randn({std::max<int64_t>(q_total, 1)}, gen, opts).narrow(0, 0, q_total).contiguous();
  }
  // Warm start too: the last Q (the average of M^T P) is orthogonalized again, as torch does; left
  // as it is, subspace iteration squares the condition of P = M Q every step. Note [PowerSGD
  // orthogonalization].
  for (const Matrix& x : mats) {
    Tensor qm = q.narrow(0, x.q_at, x.m * x.r).view({x.m, x.r});
    orthogonalize(qm, o.orthogonalization_epsilon_);
  }
  // 3. P = M Q, summed over ranks.
  Tensor p = empty({p_total}, opts);
  for (const Matrix& x : mats) {
    Tensor mm = bucket.gradient(x.k).view({x.n, x.m});
    p.narrow(0, x.p_at, x.n * x.r).view({x.n, x.r}).copy_(ops::mm(mm, q.narrow(0, x.q_at, x.m * x.r).view({x.m, x.r})));
  }
  state.p_[b] = p;
  state.q_[b] = q;
  std::shared_ptr<Work> p_work = group.allreduce(p, AllreduceOptions().op(ReduceOp::sum));

  return then_work(std::move(p_work), [&state, &group, bucket, mats, plain, flat_plain, plain_work, input, input_copy,
                                       p, q, world, b]() mutable {
    const PowerSGDOptions& o = state.options_;
    // 3b. Orthogonalize P; 4. Q = M^T P / W, summed over ranks.
    for (const Matrix& x : mats) {
      Tensor pm = p.narrow(0, x.p_at, x.n * x.r).view({x.n, x.r});
      orthogonalize(pm, o.orthogonalization_epsilon_);
      Tensor mm = bucket.gradient(x.k).view({x.n, x.m});
      Tensor qm = q.narrow(0, x.q_at, x.m * x.r).view({x.m, x.r});
      qm.copy_(ops::mm(mm.t(), pm));
    }
    if (world > 1 && q.numel() > 0) ops::mul_(q, 1.0 / world);
    if (!mats.empty()) group.allreduce(q, AllreduceOptions().op(ReduceOp::sum))->wait();
    // 5. M = P Q^T.
    for (const Matrix& x : mats) {
      Tensor pm = p.narrow(0, x.p_at, x.n * x.r).view({x.n, x.r});
      Tensor qm = q.narrow(0, x.q_at, x.m * x.r).view({x.m, x.r});
      bucket.gradient(x.k).view({x.n, x.m}).copy_(ops::mm(pm, qm.t()));
    }
    if (plain_work) {
      plain_work->wait();
      int64_t at = 0;
      for (size_t k : plain) {
        Tensor g = bucket.gradient(k);
        g.copy_(flat_plain.narrow(0, at, g.numel()).view(g.shape()));
        at += g.numel();
      }
    }
    // 6. Error feedback.
    if (o.use_error_feedback_) state.error_[b] = ops::sub(input_copy, input);
    if (!o.warm_start_) {
      state.p_.erase(b);
      state.q_.erase(b);
    }
    if (bucket.is_last) ++state.iteration_;
  });
}

}  // namespace kiln::dist
