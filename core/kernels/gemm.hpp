// Row-major GEMM over all OpenMP threads: one coarse parallel region over tiles of C, each
// tile one single-threaded cblas_sgemm (OpenBLAS stays at 1 thread, see sys/threads.hpp).
// Every element of C is produced by one sgemm call with the whole K reduction, so results
// are deterministic for a given thread count. Call from outside parallel regions.
#pragma once
#include <cstdint>

namespace lct {

// C[M,N] = alpha * op(A) * op(B) + beta * C, with op(X) = X or X^T.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// The three products of a linear layer y = x W^T with W [out, in], x [T, in], y [T, out]:
inline void linear_forward(float* y, const float* x, const float* w, int64_t T, int64_t in,
                           int64_t out) {
  gemm(false, true, T, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
}
// dx [T, in] (+)= dy W ; `accumulate` adds to dx instead of overwriting it.
inline void linear_backward_input(float* dx, const float* dy, const float* w, int64_t T, int64_t in,
                                  int64_t out, bool accumulate) {
  gemm(false, false, T, in, out, 1.0f, dy, out, w, in, accumulate ? 1.0f : 0.0f, dx, in);
}
// dW [out, in] += dy^T x
inline void linear_backward_weight(float* dw, const float* dy, const float* x, int64_t T, int64_t in,
                                   int64_t out) {
  gemm(true, false, out, in, T, 1.0f, dy, out, x, in, 1.0f, dw, in);
}

// Single-threaded sgemm, for use inside parallel regions (attention tiles).
void sgemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                  int64_t ldc);

}  // namespace lct

namespace lct {
// GFLOP/s of gemm() on an n x n x n problem with the current OpenMP threads, best of `reps`
// (the achievable peak that MFU is measured against).
double measure_gemm_gflops(int64_t n = 2048, int reps = 3);
// GFLOP/s of OpenBLAS's own threaded sgemm on `threads` threads (restores 1 afterwards).
double measure_openblas_sgemm_gflops(int64_t n, int threads, int reps = 3);
}  // namespace lct
