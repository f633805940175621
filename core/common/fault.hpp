// Faults the tests inject, all in this one module (docs/operations.md, "Testing failures"):
// LCT_INJECT_FAULT=KIND:RANK:STEP makes world rank RANK, at the start of step STEP,
//   throw      throw an exception
//   hang       stop answering
//   exit       exit at once
//   stallring  stop in the middle of its next ring exchange
//   slowring   spend kSlowRingMs more on every ring step's attention from then on (a slower
//              rank, whose neighbours' waits must count as waiting for a peer, not transfer)
//   nan        set its first weight to NaN (done by the step loop when poisons(): the step is
//              skipped, and a checkpoint of the weights must be refused)
//   finalize   stop answering inside MPI_Finalize, its work done (STEP unused: 0), as MPICH
//              4.0 over UCX's TCP can (world_finalize's guard must end it)
//   lowpeak    read the start-up probe of the peak rate at a thousandth of what it measured
//              (STEP unused: 0), as a probe slowed by other work on the cores reads low; the
//              slowest rank's reading being every rank's, all of them run with it
//   steal      report a quarter of each step as stolen from its CPUs by a hypervisor (STEP
//              unused: 0), as on a virtual machine whose vCPUs share host cores
//   slowthread run the start-up probe of the peak five times over on OpenMP thread STEP (a
//              thread's number here, not a step), as a thread whose CPU other work shares
// The step loop fires the plan; the two ring hooks are read on the ring's path through
// flags that stay false in every real run: off, a hook costs one relaxed atomic load.
#pragma once
#include <atomic>
#include <cstdint>

namespace lct {

enum class FaultKind {
  None, Throw, Hang, Exit, StallRing, SlowRing, Nan, HangInFinalize, LowPeak, Steal, SlowThread
};
inline constexpr int kSlowRingMs = 40;
inline constexpr double kLowPeakFactor = 1e-3;
inline constexpr double kStolenShare = 0.25;
inline constexpr int kSlowThreadRepeats = 5;

struct FaultPlan {
  FaultKind kind = FaultKind::None;
  int rank = -1;
  int64_t step = -1;
  bool due(int my_rank, int64_t now) const { return kind != FaultKind::None && my_rank == rank && now == step; }
  // At the start of step `now` on world rank `my_rank`: throws, hangs or exits, or arms a
  // ring hook, when this is the planned rank and step.
  void fire(int my_rank, int64_t now) const;
  bool poisons(int my_rank, int64_t now) const { return kind == FaultKind::Nan && due(my_rank, now); }
  bool hangs_in_finalize(int my_rank) const { return kind == FaultKind::HangInFinalize && my_rank == rank; }
  bool lowers_peak(int my_rank) const { return kind == FaultKind::LowPeak && my_rank == rank; }
  bool steals(int my_rank) const { return kind == FaultKind::Steal && my_rank == rank; }
  // The OpenMP thread whose probe runs slowed on this rank, or -1.
  int slowed_thread(int my_rank) const { return kind == FaultKind::SlowThread && my_rank == rank ? int(step) : -1; }
};

// From LCT_INJECT_FAULT; none when unset. Throws, naming the kinds, on a malformed value.
FaultPlan fault_from_environment();

namespace fault_detail {
inline std::atomic<bool> stall_ring{false};
inline std::atomic<int> slow_ring_ms{0};
}  // namespace fault_detail

// The ring's hooks.
inline bool fault_stalls_ring() { return fault_detail::stall_ring.load(std::memory_order_relaxed); }
inline int fault_slow_ring_ms() { return fault_detail::slow_ring_ms.load(std::memory_order_relaxed); }

}  // namespace lct
