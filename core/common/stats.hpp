// Small statistics for reports: medians, as every timing figure here is quoted.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace lct {

inline double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / double(v.size());
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The median of `repeats` timed runs of f, after one untimed run (it warms caches and JIT
// kernels up).
template <class F>
double median_seconds(int64_t repeats, F&& f) {
  std::vector<double> t;
  for (int64_t r = 0; r <= repeats; ++r) {
    const double t0 = omp_get_wtime();
    f();
    if (r > 0) t.push_back(omp_get_wtime() - t0);
  }
  return median(t);
}

}  // namespace lct
