// DistributedDataParallel::join: training on uneven inputs (torch's Join context and DDP join
// hook). Ranks that ran out of batches shadow the collectives of those still training.
#include <kiln/parallel/ddp.h>

#include <kiln/autograd/grad_mode.h>
#include <kiln/core/factory.h>

namespace kiln::dist {

// Note [Join]
// Every rank must issue the same collectives, so a rank that has no batch left cannot simply
// stop: the others would wait forever in their next bucket all-reduce. While join() runs, every
// forward of a rank still training (prepare_forward) starts with one small all-reduce, the join
// header: [still in, backward syncs, terminate, then one slot per rank that is still in]. A rank
// whose body returned loops on the same header with its own slots zero:
//   - no rank is still in: every body has returned; leave the loop;
//   - otherwise it takes part in what that forward and backward issue: the buffer broadcast
//     (from the lowest rank still in, since rank 0 may be the one that stopped), and, when the
//     backward syncs (no_sync is off), one all-reduce per bucket with zero gradients and no
//     parameter used (Reducer::shadow_iteration: the same bucket order, the same order-check
//     codes, the bucket rebuild after the first synced iteration), then `on_shadow_step`.
// The divisor (Note [Divide before summing]) is the initial world size by default, as torch's
// divide_by_initial_world_size=True: a step with k ranks in moves by k/W of their average. With
// divide_by_initial_world_size(false) the ranks still in divide by k, read from the header: the
// step is then that of one process on the samples of those k ranks (equal batch sizes).
// throw_on_early_termination: the first rank to run out sets "terminate" in its header, and every
// rank throws DistributedError (the others from their next forward's header) instead.
// When every rank is done, the ranks that finished last ("last joiners": still in when the others
// had all stopped) hold the fully trained model; the highest of them broadcasts its parameters
// and buffers to everyone (torch's _sync_final_model). Optimizer states are not synchronized (as
// in torch): the ranks that stopped early keep theirs.
// Cost: the header is one all-reduce and one host read per forward, only inside join().

DistributedDataParallel::JoinHeader DistributedDataParallel::exchange_join_header(bool active) {
  const int world = group_->size();
  std::vector<double> v(size_t(3 + world), 0.0);
  if (active) {
    v[0] = 1;
    v[1] = reducer_->require_backward_grad_sync() ? 1 : 0;
    v[size_t(3 + group_->rank())] = 1;
  } else {
    v[2] = join_->throw_on_early_termination_ ? 1 : 0;
  }
  Tensor header = from_vector(v, {int64_t(v.size())}).to(DType::f32).to(group_->device());
  group_->allreduce(header, AllreduceOptions().op(ReduceOp::sum))->wait();
  const std::vector<double> sum = header.to(DType::f64).to_vector<double>();
  JoinHeader h;
  h.active = static_cast<int>(sum[0] + 0.5);
  KILN_CHECK_DIST(sum[1] < 0.5 || sum[1] > h.active - 0.5, "DistributedDataParallel::join: ", int(sum[1] + 0.5),
                  " of the ", h.active, " ranks still training sync gradients in this backward and the others "
                  "run under no_sync; every rank must use no_sync for the same micro-steps");
  h.sync = sum[1] > 0.5;
  h.terminate = sum[2] > 0.5;
  for (int r = 0; r < world && h.first_active < 0; ++r)
    if (sum[size_t(3 + r)] > 0.5) h.first_active = r;
  return h;
}

void DistributedDataParallel::join(const std::function<void()>& body, JoinOptions options,
                                   const std::function<void()>& on_shadow_step) {
  KILN_CHECK(body != nullptr, "DistributedDataParallel::join: the body is empty");
  if (!options.enable_ || group_->size() == 1) {
    body();
    return;
  }
  KILN_CHECK(!join_, "DistributedDataParallel::join: already inside join()");
  KILN_CHECK(options.divide_by_initial_world_size_ || !reducer_->has_comm_hook(),
             "DistributedDataParallel::join: divide_by_initial_world_size(false) needs the default reduction; a "
             "comm hook averages over the whole world size itself");
  const int world = group_->size();
  join_ = options;
  try {
    body();
  } catch (...) {
    join_.reset();
    reducer_->set_div_factor(world);
    throw;
  }
  // This rank is done: shadow the others until every rank is (Note [Join]).
  bool last_joiner = true;
  try {
    for (;;) {
      JoinHeader h = exchange_join_header(/*active=*/false);
      if (h.active == 0) break;
      last_joiner = false;
      KILN_CHECK_DIST(!options.throw_on_early_termination_, "DistributedDataParallel::join: rank ", group_->rank(),
                      " exhausted its inputs while ", h.active,
                      " rank(s) still train (throw_on_early_termination); throwing on every rank");
      if (options_.broadcast_buffers_) broadcast_from(module_->buffers(), h.first_active);
      if (h.sync) {
        reducer_->shadow_iteration();
        if (on_shadow_step) on_shadow_step();
      }
    }
  } catch (...) {
    join_.reset();
    reducer_->set_div_factor(world);
    throw;
  }
  join_.reset();
  reducer_->set_div_factor(world);
  sync_final_model(last_joiner);
}

// The highest last joiner's parameters and buffers on every rank (two collectives).
void DistributedDataParallel::sync_final_model(bool last_joiner) {
  const int world = group_->size();
  std::vector<double> v(size_t(world), 0.0);
  if (last_joiner) v[size_t(group_->rank())] = 1;
  Tensor flags = from_vector(v, {int64_t(world)}).to(DType::f32).to(group_->device());
  group_->allreduce(flags, AllreduceOptions().op(ReduceOp::sum))->wait();
  const std::vector<double> got = flags.to(DType::f64).to_vector<double>();
  int root = -1;
  for (int r = 0; r < world; ++r)
    if (got[size_t(r)] > 0.5) root = r;
  KILN_ASSERT(root >= 0, "join: no rank finished last");
  std::vector<Tensor> state = module_->parameters();
  for (const Tensor& b : module_->buffers()) state.push_back(b);
  NoGradGuard no_grad;
  broadcast_from(state, root);
}

}  // namespace kiln::dist
