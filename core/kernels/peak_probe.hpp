// The multiply-add peak measured with the ISA kernels' own probe loops (kernels/isa/): the
// figure MFU is reported against (sys/peak.hpp).
#pragma once
#include <functional>

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

}  // namespace lct
