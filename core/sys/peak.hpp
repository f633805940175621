// The machine's real multiply-add peak, measured at start-up on the run's own threads (with
// their binding) in well under a second: MFU is model FLOP/s against this, never against a
// library's sgemm, whose kernels may be narrower than the CPU's.
#pragma once
#include <string>

#include "sys/cpu.hpp"

namespace lct {

struct Peak {
  double fp32 = 0;        // GFLOP/s of this rank: FMA peak of the CPU's widest fp32 ISA
  double bf16 = 0;        // GFLOP/s of the bf16 path (0 when the CPU has none)
  std::string fp32_how;   // "AVX-512 FMA, 2 threads, measured"
  std::string bf16_how;
  // Nominal bf16 peak on AMX (1024 FLOP per cycle per core at the measured AVX-512 clock):
  // lctrain's own bf16 kernels use vdpbf16ps; oneDNN's matrix products use AMX there.
  double bf16_amx_nominal = 0;
};

// Runs the probes on `threads` OpenMP threads (all at once: the peak under full load).
Peak measure_peak(const CpuInfo& cpu, int threads);

}  // namespace lct
