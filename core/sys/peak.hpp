// The machine's real multiply-add peak (measured by kernels/peak_probe.hpp at start-up on the
// run's own threads, with their binding, in well under a second): MFU is model FLOP/s against
// this, never against a library's sgemm, whose kernels may be narrower than the CPU's.
#pragma once
#include <string>

#include "common/bf16.hpp"
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
  // The fp32 probe's slowest thread: each thread's best window against the median thread's
  // (1: even; far below it when other work shares that thread's CPU), on `slowest_rank`.
  double slowest_thread_rate = 1;
  int slowest_thread = -1, slowest_rank = -1, slowest_cpu = -1;  // cpu -1: threads not bound
};

// The kernel path for attention: the run's ISA, except that bf16 inputs go to the fp32 tiles
// (widened while packed) on Intel CPUs, whose AVX512_BF16 cores run vdpbf16ps at half the
// fp32 FMA FLOP rate (measured on a Xeon with AMX: 596-763 against 1,176-1,333 GFLOP/s on 16
// threads; AMD's Zen 4/5 run it at twice). Decided by the CPU, not by a noisy measurement,
// so that a resumed run always picks the same kernels (bit-exact resume).
Isa attention_isa(Isa isa, Precision precision, const CpuInfo& cpu);

}  // namespace lct
