#include "kernels/gemm.hpp"

#include <cblas.h>
#include <omp.h>

#include <algorithm>

namespace lct {

void sgemm_serial(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const double flops = 2.0 * double(M) * double(N) * double(K);
  if (threads == 1 || flops < 2e6) {
    sgemm_serial(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  // Split the longer side of C into 2 tiles per thread (rounded to 16 for vector alignment)
  // so a slow core does not hold up the rest; dynamic schedule, fixed partition.
  const bool split_rows = M >= N;
  const int64_t len = split_rows ? M : N;
  const int64_t want = int64_t(threads) * 2;
  const int64_t tile = std::max<int64_t>(16, (len + want - 1) / want + 15) / 16 * 16;
  const int64_t tiles = (len + tile - 1) / tile;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t b = t * tile, n = std::min(tile, len - b);
    if (split_rows) {
      const float* a = ta ? A + b : A + b * lda;
      sgemm_serial(ta, tb, n, N, K, alpha, a, lda, B, ldb, beta, C + b * ldc, ldc);
    } else {
      const float* bb = tb ? B + b * ldb : B + b;
      sgemm_serial(ta, tb, M, n, K, alpha, A, lda, bb, ldb, beta, C + b, ldc);
    }
  }
}

}  // namespace lct

#include <vector>

namespace lct {

namespace {
template <class F>
double best_gflops(int64_t n, int reps, F&& run) {
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const double t0 = omp_get_wtime();
    run();
    best = std::max(best, 2.0 * double(n) * double(n) * double(n) / (omp_get_wtime() - t0) / 1e9);
  }
  return best;
}
}  // namespace

double measure_gemm_gflops(int64_t n, int reps) {
  std::vector<float> a(size_t(n * n), 0.5f), b(size_t(n * n), 0.25f), c(size_t(n * n));
  return best_gflops(n, reps, [&] {
    gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  });
}

double measure_openblas_sgemm_gflops(int64_t n, int threads, int reps) {
  std::vector<float> a(size_t(n * n), 0.5f), b(size_t(n * n), 0.25f), c(size_t(n * n));
  const int omp = omp_get_max_threads();
  openblas_set_num_threads(threads);
  const double g = best_gflops(n, reps, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(n), int(n), 1.0f, a.data(),
                int(n), b.data(), int(n), 0.0f, c.data(), int(n));
  });
  openblas_set_num_threads(1);
  omp_set_num_threads(omp);  // the OpenMP build of OpenBLAS changes it
  return g;
}

}  // namespace lct
