// Vectorised exp for the softmax inner loops (AVX2 + FMA, scalar elsewhere). Cephes' expf
// polynomial, about 1 ulp. exp(-inf) and anything below -87.3 is exactly 0 (masked scores);
// NaN propagates (so a broken run is detected, not hidden).
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace lct {

#if defined(__AVX2__) && defined(__FMA__)
inline __m256 exp256(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-87.3365447504f);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(hi, x);  // operand order keeps NaN
  x = _mm256_max_ps(lo, x);
  __m256 fx = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f));
  fx = _mm256_floor_ps(fx);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(underflow, y);
}
#endif

// x[i] = exp(x[i] - shift); returns the sum of the results.
inline float exp_shift_sum(float* x, int64_t n, float shift) {
  int64_t i = 0;
  float sum = 0.0f;
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 s = _mm256_set1_ps(shift);
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256 v = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    _mm256_storeu_ps(x + i, v);
    acc = _mm256_add_ps(acc, v);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  for (float l : lanes) sum += l;
#endif
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

// Sum of exp(x[i] - shift) without modifying x.
inline float sum_exp_shift(const float* x, int64_t n, float shift) {
  int64_t i = 0;
  float sum = 0.0f;
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 s = _mm256_set1_ps(shift);
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), s)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  for (float l : lanes) sum += l;
#endif
  for (; i < n; ++i) sum += std::exp(x[i] - shift);
  return sum;
}

}  // namespace lct
