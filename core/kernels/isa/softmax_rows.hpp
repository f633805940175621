// The softmax's row pieces between two matrix products (the oneDNN tile path, whose products
// are oneDNN's): compiled once per ISA like the fused tiles, after simd.hpp.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/bf16.hpp"

namespace lct::LCT_ISA_NS {

// e^x is computed as 2^(x log2 e)
constexpr float kRowsLog2e = 1.44269504088896341f;

// max of x [n]; -inf when n is 0 or every x is -inf (a row that sees nothing yet).
inline float row_max(const float* x, int64_t n) {
  constexpr int W = Simd::W;
  int64_t i = 0;
  float m = -INFINITY;
  if (n >= W) {
    Simd::V acc = Simd::load(x);
    for (i = W; i + W <= n; i += W) acc = Simd::max(acc, Simd::load(x + i));
    m = Simd::reduce_max(acc);
  }
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// v stored in the products' type: fp32 as it is; bf16 rounded to nearest even (as to_bf16:
// vcvtneps2bf16 where the ISA has it, else Simd::store_bf16).
inline void store_product(float* p, Simd::V v) { Simd::store(p, v); }
inline void store_product(bf16* p, Simd::V v) {
#if defined(LCT_ISA_AVX512) && defined(__AVX512BF16__)
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), (__m256i)_mm512_cvtneps_pbh(v));
#else
  Simd::store_bf16(p, v);
#endif
}

// s [n] = -inf where the query (qidx, qlo, qdoc >= 0) does not see the key (kidx, kdoc):
// Simd::visible's rule, qlo the lowest idx of the query's window (INT32_MIN without one).
inline void mask_row(float* s, const int32_t* kidx, const int32_t* kdoc, int64_t n, int32_t qidx, int32_t qlo,
                     int32_t qdoc) {
  constexpr int W = Simd::W;
  const Simd::V hidden = Simd::set1(-INFINITY);
  int64_t i = 0;
  for (; i + W <= n; i += W)
    Simd::store(s + i, Simd::keep(Simd::visible(kidx + i, kdoc + i, qidx, qlo, qdoc), Simd::load(s + i), hidden));
  for (; i < n; ++i)
    if (!(kidx[i] <= qidx && kidx[i] >= qlo && kdoc[i] == qdoc)) s[i] = -INFINITY;
}

// 2^x for a value stored in the products' type: where it is rounded to bf16 and the ISA has
// the shorter polynomial (AVX-512), that one, as the fused bf16 forward does.
template <class Out>
inline Simd::V exp2_for(Simd::V x) {
#if defined(LCT_ISA_AVX512)
  if constexpr (std::is_same_v<Out, bf16>) return Simd::exp2_bf16(x);
#endif
  return Simd::exp2_softmax(x);
}

// out [n] = e^(x - shift) in the products' type (out may be x), as 2^((x - shift) log2 e):
// exactly 0 where x is -inf (masked); returns the sum of the fp32 values. shift is finite.
template <class Out>
inline float exp_shift_sum_to(const float* x, int64_t n, float shift, Out* out) {
  constexpr int W = Simd::W;
  const float base = -shift * kRowsLog2e;
  const Simd::V scale = Simd::set1(kRowsLog2e), offset = Simd::set1(base);
  Simd::V acc = Simd::zero();
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    const Simd::V p = exp2_for<Out>(Simd::fma(Simd::load(x + i), scale, offset));
    store_product(out + i, p);
    acc = Simd::add(acc, p);
  }
  float sum = Simd::reduce_add(acc);
  for (; i < n; ++i) {
    const float p = std::exp2(x[i] * kRowsLog2e + base);
    store_as(out + i, p);
    sum += p;
  }
  return sum;
}
inline float exp_shift_sum(float* x, int64_t n, float shift) { return exp_shift_sum_to(x, n, shift, x); }
inline float exp_shift_sum_bf16(const float* x, int64_t n, float shift, bf16* out) {
  return exp_shift_sum_to(x, n, shift, out);
}

// A backward tile's row in one pass: p = e^(s - lse) (0 where s is -inf: masked) and
// dS = p (dP - delta), both stored in the products' type (p may be s, ds dp). lse finite.
template <class Out>
inline void probs_and_grads_to(const float* s, const float* dp, int64_t n, float lse, float delta, Out* p, Out* ds) {
  constexpr int W = Simd::W;
  const float base = -lse * kRowsLog2e;
  const Simd::V scale = Simd::set1(kRowsLog2e), offset = Simd::set1(base), dl = Simd::set1(delta);
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    const Simd::V pv = exp2_for<Out>(Simd::fma(Simd::load(s + i), scale, offset));
    const Simd::V dv = Simd::mul(pv, Simd::sub(Simd::load(dp + i), dl));
    store_product(p + i, pv);
    store_product(ds + i, dv);
  }
  for (; i < n; ++i) {
    const float pv = std::exp2(s[i] * kRowsLog2e + base);
    const float dv = pv * (dp[i] - delta);
    store_as(p + i, pv);
    store_as(ds + i, dv);
  }
}
inline void probs_and_grads(float* s, float* dp, int64_t n, float lse, float delta) {
  probs_and_grads_to(s, dp, n, lse, delta, s, dp);
}
inline void probs_and_grads_bf16(const float* s, const float* dp, int64_t n, float lse, float delta, bf16* p,
                                 bf16* ds) {
  probs_and_grads_to(s, dp, n, lse, delta, p, ds);
}

}  // namespace lct::LCT_ISA_NS
