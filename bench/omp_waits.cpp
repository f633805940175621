// A preload library that reports how long a program's OpenMP parallel regions wait for their
// threads: from the region's call to its last thread's start (fork), and from its last thread's
// end to the call's return (join), summed over the run, with a histogram of the fork waits.
// It wraps libgomp's GOMP_parallel (how GCC compiles `#pragma omp parallel`, `parallel for`
// with a static schedule included) for outermost regions; nested ones pass through.
//   LD_PRELOAD=build/bench/liblct_omp_waits.so lctrain train ...   (one line on stderr at exit)
// On a healthy machine the waits are a few µs a region; where threads sleep or vCPUs are
// descheduled between regions (virtual machines), they can reach milliseconds, and a step
// runs 400-450 regions (the 30m preset at 4K-16K tokens).
#include <dlfcn.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <cstdio>

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

using ParallelFn = void (*)(void (*)(void*), void*, unsigned, unsigned);

struct Region {
  void (*fn)(void*);
  void* data;
  std::atomic<double> last_start{0}, last_end{0};
};

void raise_to(std::atomic<double>& a, double v) {
  double cur = a.load();
  while (v > cur && !a.compare_exchange_weak(cur, v)) {
  }
}

void run_timed(void* p) {
  Region& r = *static_cast<Region*>(p);
  raise_to(r.last_start, now());
  r.fn(r.data);
  raise_to(r.last_end, now());
}

struct Totals {
  long regions = 0;
  double inside = 0, fork = 0, join = 0, worst_fork = 0;
  long fork_hist[5] = {};  // < 10 µs, < 100 µs, < 1 ms, < 10 ms, more
  ~Totals() {
    if (regions == 0) return;
    std::fprintf(stderr,
                 "omp_waits: %ld regions, %.3f s inside them; waiting for threads: fork %.3f s (worst %.2f ms), "
                 "join %.3f s; fork waits <10us %ld, <100us %ld, <1ms %ld, <10ms %ld, more %ld\n",
                 regions, inside, fork, 1e3 * worst_fork, join, fork_hist[0], fork_hist[1], fork_hist[2],
                 fork_hist[3], fork_hist[4]);
  }
} totals;  // outermost regions start on one thread at a time: no lock needed

}  // namespace

extern "C" void GOMP_parallel(void (*fn)(void*), void* data, unsigned threads, unsigned flags) {
  static const auto real = reinterpret_cast<ParallelFn>(dlsym(RTLD_NEXT, "GOMP_parallel"));
  if (omp_in_parallel()) return real(fn, data, threads, flags);
  Region r{fn, data};
  const double t0 = now();
  real(run_timed, &r, threads, flags);
  const double t1 = now(), fork = r.last_start - t0;
  totals.regions++;
  totals.inside += t1 - t0;
  totals.fork += fork;
  totals.join += t1 - r.last_end;
  if (fork > totals.worst_fork) totals.worst_fork = fork;
  totals.fork_hist[fork < 1e-5 ? 0 : fork < 1e-4 ? 1 : fork < 1e-3 ? 2 : fork < 1e-2 ? 3 : 4]++;
}
