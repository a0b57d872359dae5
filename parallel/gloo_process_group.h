// The Gloo process group: CPU collectives over TCP (c10d's ProcessGroupGloo). Collectives run on
// one background worker thread in the order they were issued (on a group of one rank, in the
// caller's thread, complete when the call returns); each returns a Work whose wait() rethrows a
// failure as kiln::Error naming the collective, its sequence number and the late ranks.
#pragma once

#include <memory>
#include <string>

#include <kiln/core/arg.h>
#include <kiln/parallel/process_group.h>
#include <kiln/parallel/store.h>

namespace kiln::dist {

/// Options of the Gloo process group: timeout and this rank's address.
struct GlooOptions {
  KILN_ARG(Millis, timeout) = kDefaultTimeout;  ///< rendezvous and every collective
  std::string hostname_ = "127.0.0.1";  ///< this rank's address for its peers (the TCP device binds it)
  GlooOptions& hostname(std::string h) { hostname_ = std::move(h); return *this; }
};

/// Connects `size` ranks through `store` (keys "gloo/..." for Gloo's rendezvous, "watchdog/..." for
/// the heartbeats, parallel/watchdog.h). Blocks until every rank has connected.
///
/// Tensors are CPU and contiguous; dtypes f32, f64, bf16, f16, i64, i32, u8. Reductions run in the
/// tensor's dtype (bf16/f16 element pairs are added in float and rounded, as NCCL does), so the
/// wire carries 2 bytes per bf16 element. avg is sum then divide, floating dtypes only.
/// reduce_scatter is a ring (Note [Ring reduce-scatter] in parallel/gloo_process_group.cpp, in the source tree, in the source
/// tree); allgather is Gloo's ring allgather. Both take equal chunks, as NCCL's do; parallel/shard_layout.h
/// pads sizes that do not divide. A tensor handed to a collective must not be touched until its Work's wait()
/// returns. Every collective must end within `timeout` of being issued: a watchdog thread fails the group
/// when the oldest one has not (Note [Watchdog] in parallel/watchdog.cpp, in the source tree); a closed
/// connection (a dead peer) fails it at once. The failure (kiln::DistributedError, from every pending Work's
/// wait()) names the collective, its sequence number and the ranks that had not started it, and says where
/// this rank's flight recorder was dumped. After a failure the group is broken: later collectives fail
/// at once, citing the first failure. KILN_FAULT_INJECT (fault_injection.h) stalls or kills a rank
/// on purpose.
std::shared_ptr<ProcessGroup> make_gloo_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                      const GlooOptions& options = {});

}  // namespace kiln::dist
