// Where a step's time goes. Code calls lap(phase) after each piece of work: the time since
// the previous lap is charged to that phase. Called outside parallel regions only.
#pragma once
#include <omp.h>

#include <array>
#include <cstddef>

namespace lct {

enum class Phase { AttnFwd, AttnBwd, Gemm, Other, Optimizer, IO, Comm, Allreduce, Offload, Count };
inline constexpr const char* kPhaseNames[] = {"attn_fwd", "attn_bwd", "gemm", "other",
                                              "optimizer", "io", "comm", "allreduce", "offload"};

class PhaseClock {
 public:
  void reset() {
    seconds.fill(0.0);
    last_ = omp_get_wtime();
  }
  void lap(Phase p) {
    const double now = omp_get_wtime();
    seconds[size_t(p)] += now - last_;
    last_ = now;
  }
  // The time since the previous lap is charged to no phase (work outside the step's time).
  void skip() { last_ = omp_get_wtime(); }
  double total() const {
    double s = 0;
    for (double x : seconds) s += x;
    return s;
  }
  std::array<double, size_t(Phase::Count)> seconds{};

 private:
  double last_ = omp_get_wtime();
};

}  // namespace lct
