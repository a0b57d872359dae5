// Fault injection for tests of the watchdog: a deterministic stall or death of one rank at one
// collective, asked for through KILN_FAULT_INJECT so that real jobs (kiln-run, torchrun) can be
// made to fail on purpose. Both process groups (Gloo and NCCL) honour it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <kiln/parallel/store.h>

namespace kiln::dist {

/// KILN_FAULT_INJECT=KIND:rank=R:seq=N[:ms=M], e.g. "stall:rank=1:seq=5".
///   stall  rank R holds collective N back before it starts (Gloo: the worker waits; NCCL: the
///          communication stream is held before the collective's kernels), for M ms or, without
///          ms, until the group's watchdog gives up on it. To the other ranks R never arrives.
///   exit   rank R dies (_exit(9), no cleanup) when collective N would start.
struct FaultInjection {
  enum class Kind { stall, exit };
  Kind kind = Kind::stall;
  int rank = 0;
  uint64_t seq = 0;
  Millis duration{0};  ///< stall only; 0: until the watchdog aborts the group

  /// Whether this fault fires for collective `seq` on `rank`.
  bool fires(int on_rank, uint64_t at_seq) const { return on_rank == rank && at_seq == seq; }
  std::string str() const;  ///< as written in KILN_FAULT_INJECT
};

/// Parses the syntax above; ValueError naming the text and the expected form when malformed.
FaultInjection parse_fault_injection(const std::string& text);
/// KILN_FAULT_INJECT, parsed; nullopt when unset or empty.
std::optional<FaultInjection> fault_injection_from_env();

}  // namespace kiln::dist
