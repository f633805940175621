#include "kernels/peak_probe.hpp"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "common/error.hpp"
#include "kernels/isa/kernels.hpp"

namespace lct {

namespace {

// GFLOP/s of `probe` run on every thread at once: the best of a few ~20 ms windows after a
// warm-up window (clocks ramp up; a noisy neighbour lowers a window, never raises one).
double run_probe(double (*probe)(int64_t), int threads, const std::function<void()>& together) {
  const double t0 = omp_get_wtime();
  const double flops_per_iter = probe(1) ;
  int64_t iters = 100000;
  while (true) {
    const double s = omp_get_wtime();
    probe(iters);
    const double dt = omp_get_wtime() - s;
    if (dt > 0.004 || omp_get_wtime() - t0 > 0.2) {
      iters = std::max<int64_t>(1000, int64_t(double(iters) * 0.02 / std::max(dt, 1e-6)));
      break;
    }
    iters *= 4;
  }
  double best = 0;
  for (int window = 0; window < 6; ++window) {
    if (together) together();
    std::vector<double> seconds(size_t(threads), 0.0);
#pragma omp parallel num_threads(threads)
    {
#pragma omp barrier
      const double s = omp_get_wtime();
      probe(iters);
      seconds[size_t(omp_get_thread_num())] = omp_get_wtime() - s;
    }
    const double wall = *std::max_element(seconds.begin(), seconds.end());
    if (window > 0) best = std::max(best, flops_per_iter * double(iters) * threads / wall / 1e9);
  }
  return best;
}

const char* fp32_name(Isa isa) {
  return isa == Isa::Avx512 || isa == Isa::Avx512Bf16 ? "AVX-512 FMA"
         : isa == Isa::Avx2                            ? "AVX2 FMA"
                                                       : "scalar multiply-add";
}

}  // namespace

Peak measure_peak(const CpuInfo& cpu, Isa path, int threads, const std::function<void()>& together) {
  Peak p;
  const IsaKernels* widest = isa_kernels(cpu.runs(path) ? path : cpu.widest());
  if (!widest) widest = isa_kernels(Isa::Generic);
  const std::string on = cat(threads, " thread", threads == 1 ? "" : "s", ", measured");
  p.fp32 = run_probe(widest->fma_probe, threads, together);
  p.fp32_how = cat(fp32_name(widest->isa), ", ", on);
  if (widest->bf16_probe) {
    p.bf16 = run_probe(widest->bf16_probe, threads, together);
    p.bf16_how = cat("vdpbf16ps, ", on);
  }
  if (cpu.amx_bf16 && (widest->isa == Isa::Avx512 || widest->isa == Isa::Avx512Bf16))
    p.bf16_amx_nominal = 1024.0 * (p.fp32 / 64.0);  // 64 fp32 FLOP per cycle per core
  return p;
}

}  // namespace lct
