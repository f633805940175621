#include "kernels/peak_probe.hpp"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "common/error.hpp"
#include "common/fault.hpp"
#include "kernels/isa/kernels.hpp"

namespace lct {

namespace {

struct ProbeRate {
  double gflops = 0;            // all threads together, the best window
  int slowest_thread = -1;      // the thread whose best window was the slowest
  double slowest_rate = 1;      // its best window's rate against the median thread's
};

// The slowest thread by its best window's seconds, against the median thread's ([n]).
void find_slowest(const std::vector<double>& best_seconds, ProbeRate& r) {
  std::vector<double> sorted = best_seconds;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[(sorted.size() - 1) / 2];  // of 2 threads, the faster
  const auto slowest = std::max_element(best_seconds.begin(), best_seconds.end());
  r.slowest_thread = int(slowest - best_seconds.begin());
  r.slowest_rate = *slowest > 0 ? median / *slowest : 1.0;
}

// The iterations of `probe` that take about 20 ms on this thread.
int64_t window_iters(double (*probe)(int64_t)) {
  const double t0 = omp_get_wtime();
  for (int64_t iters = 100000;; iters *= 4) {
    const double s = omp_get_wtime();
    probe(iters);
    const double dt = omp_get_wtime() - s;
    if (dt > 0.004 || omp_get_wtime() - t0 > 0.2)
      return std::max<int64_t>(1000, int64_t(double(iters) * 0.02 / std::max(dt, 1e-6)));
  }
}

// GFLOP/s of `probe` run on every thread at once: the best of a few ~20 ms windows after a
// warm-up window (clocks ramp up; a noisy neighbour lowers a window, never raises one).
// Each thread's best window too: a thread slower than the others in every window is on a
// CPU that something else uses, and every parallel region waits for it.
ProbeRate run_probe(double (*probe)(int64_t), int threads, const std::function<void()>& together,
                    int slowed_thread) {
  const double flops_per_iter = probe(1);
  const int64_t iters = window_iters(probe);
  ProbeRate r;
  std::vector<double> best_seconds(size_t(threads), 1e30);
  for (int window = 0; window < 6; ++window) {
    if (together) together();
    std::vector<double> seconds(size_t(threads), 0.0);
#pragma omp parallel num_threads(threads)
    {
#pragma omp barrier
      const int t = omp_get_thread_num();
      const double s = omp_get_wtime();
      for (int i = 0; i < (t == slowed_thread ? kSlowThreadRepeats : 1); ++i) probe(iters);
      seconds[size_t(t)] = omp_get_wtime() - s;
    }
    if (window == 0) continue;
    const double wall = *std::max_element(seconds.begin(), seconds.end());
    r.gflops = std::max(r.gflops, flops_per_iter * double(iters) * threads / wall / 1e9);
    for (size_t t = 0; t < seconds.size(); ++t) best_seconds[t] = std::min(best_seconds[t], seconds[t]);
  }
  find_slowest(best_seconds, r);
  return r;
}

const char* fp32_name(Isa isa) {
  return isa == Isa::Avx512 || isa == Isa::Avx512Bf16 ? "AVX-512 FMA"
         : isa == Isa::Avx2                            ? "AVX2 FMA"
                                                       : "scalar multiply-add";
}

// "1 thread", "2 threads": what a probe ran on.
std::string threads_text(int threads) { return cat(threads, threads == 1 ? " thread" : " threads"); }

// The probes of the kernel path `path`, or of the widest path this CPU runs.
const IsaKernels* probe_kernels(const CpuInfo& cpu, Isa path) {
  const IsaKernels* widest = isa_kernels(cpu.runs(path) ? path : cpu.widest());
  return widest ? widest : isa_kernels(Isa::Generic);
}

}  // namespace

Peak measure_peak(const CpuInfo& cpu, Isa path, int threads, const std::function<void()>& together,
                  int slowed_thread) {
  Peak p;
  const IsaKernels* widest = probe_kernels(cpu, path);
  const std::string on = cat(threads_text(threads), ", measured");
  const ProbeRate fp32 = run_probe(widest->fma_probe, threads, together, slowed_thread);
  p.fp32 = fp32.gflops;
  p.slowest_thread = fp32.slowest_thread;
  p.slowest_thread_rate = fp32.slowest_rate;
  p.fp32_how = cat(fp32_name(widest->isa), ", ", on);
  if (widest->bf16_probe) {
    p.bf16 = run_probe(widest->bf16_probe, threads, together, -1).gflops;
    p.bf16_how = cat("vdpbf16ps, ", on);
  }
  if (cpu.amx_bf16 && (widest->isa == Isa::Avx512 || widest->isa == Isa::Avx512Bf16))
    p.bf16_amx_nominal = 1024.0 * (p.fp32 / 64.0);  // 64 fp32 FLOP per cycle per core
  return p;
}

ProbeWindows probe_windows(const CpuInfo& cpu, Isa path, bool bf16, int threads, double seconds) {
  const IsaKernels* k = probe_kernels(cpu, path);
  double (*probe)(int64_t) = bf16 && k->bf16_probe ? k->bf16_probe : k->fma_probe;
  ProbeWindows w;
  w.how = cat(probe == k->bf16_probe ? "vdpbf16ps" : fp32_name(k->isa), ", ", threads_text(threads));
  const int64_t iters = window_iters(probe);  // (its calibration warms the clocks up)
  const double flops = probe(1) * double(iters);  // a thread's in a window
  w.thread.resize(size_t(threads));
  const double start = omp_get_wtime();
  while (omp_get_wtime() - start < seconds) {
    std::vector<double> s(size_t(threads), 0.0);
#pragma omp parallel num_threads(threads)
    {
#pragma omp barrier
      const double t0 = omp_get_wtime();
      probe(iters);
      s[size_t(omp_get_thread_num())] = omp_get_wtime() - t0;
    }
    w.all.push_back(flops * threads / *std::max_element(s.begin(), s.end()) / 1e9);
    for (size_t t = 0; t < s.size(); ++t) w.thread[t].push_back(flops / s[t] / 1e9);
  }
  return w;
}

}  // namespace lct
