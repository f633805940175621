// The multiply-add peak measured with the ISA kernels' own probe loops (kernels/isa/): the
// figure MFU is reported against (sys/peak.hpp).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "sys/cpu.hpp"
#include "sys/peak.hpp"

namespace lct {

// Runs the probes of the kernel path `path` (the run's: MFU is against the peak of the code
// that runs, so --isa avx2 on an AVX-512 CPU is measured against AVX2's FMA peak) on
// `threads` OpenMP threads (all at once: the peak under full load). `together`, called
// before each timed window, lines the windows of several ranks up (a barrier), so that each
// rank is timed while the others are busy too. `slowed_thread` (a test's, else -1) runs each
// window's fp32 probe kSlowThreadRepeats times over (common/fault.hpp's slowthread).
Peak measure_peak(const CpuInfo& cpu, Isa path, int threads, const std::function<void()>& together = {},
                  int slowed_thread = -1);

// The same probe (fp32, or with bf16 the vdpbf16ps probe where the path has one) on every
// thread at once for `seconds`, in ~20 ms windows: each window's GFLOP/s, all threads together
// (the slowest thread's time) and each thread's own. The peak is the best window; how far the
// others fall below it is how much of its cores a shared host gives this run.
struct ProbeWindows {
  std::string how;                        // "AVX2 FMA, 2 threads"
  std::vector<double> all;                // [windows]
  std::vector<std::vector<double>> thread;  // [threads][windows]
};
ProbeWindows probe_windows(const CpuInfo& cpu, Isa path, bool bf16, int threads, double seconds);

}  // namespace lct
