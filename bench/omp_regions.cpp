// What one OpenMP parallel region costs on this machine: back to back, and after the main
// thread has worked alone for a while (as between a training step's phases), when the other
// threads may have stopped spinning and gone to sleep, or their vCPUs been descheduled by a
// hypervisor. A training step runs hundreds of regions, so a cost of milliseconds a region
// (seen on virtual machines) is seconds a step. Steal time: sys/steal.hpp, over the process's CPUs.
//   OMP_NUM_THREADS=16 lct_omp_regions [REGIONS [GAP_US...]]   (default: 2000 0 100 1000 20000)
// Compare OMP_WAIT_POLICY=active and passive; lctrain's threads run the same OpenMP runtime.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "sys/steal.hpp"
#include "sys/topology.hpp"

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The main thread alone and busy (not asleep) until time t.
void work_alone_until(double t) {
  while (now() < t) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int regions = argc > 1 ? std::atoi(argv[1]) : 2000;
  std::vector<double> gaps_us;
  for (int a = 2; a < argc; ++a) gaps_us.push_back(std::atof(argv[a]));
  if (gaps_us.empty()) gaps_us = {0, 100, 1000, 20000};
  if (regions < 1) {
    std::fprintf(stderr, "usage: lct_omp_regions [REGIONS >= 1 [GAP_US...]]\n");
    return 2;
  }
  const std::vector<int> cpus = lct::current_cpuset();  // the CPUs the threads may run on
  std::vector<int> touched(size_t(omp_get_max_threads()) * 16);  // a cache line per thread
#pragma omp parallel
  touched[size_t(omp_get_thread_num()) * 16] = 1;  // the pool started
  for (const double gap_us : gaps_us) {
    const double steal0 = lct::stolen_seconds(cpus);
    double total = 0, worst = 0;
    for (int i = 0; i < regions; ++i) {
      if (gap_us > 0) work_alone_until(now() + gap_us * 1e-6);
      const double t0 = now();
#pragma omp parallel
      ++touched[size_t(omp_get_thread_num()) * 16];
      const double dt = now() - t0;
      total += dt;
      if (dt > worst) worst = dt;
    }
    std::printf("omp_regions: %d threads, %.0f us alone before each: mean %.1f us, worst %.1f us over %d regions; "
                "steal %.3f s over %zu CPUs\n",
                omp_get_max_threads(), gap_us, 1e6 * total / regions, 1e6 * worst, regions,
                lct::stolen_seconds(cpus) - steal0, cpus.size());
  }
  return 0;
}
