// One vector type per kernel path, with the same static members, so that the tile kernels
// are written once (flash_tiles.hpp) and compiled once per ISA. Included only by the ISA
// translation units (isa_*.cpp), each compiled with exactly its ISA's flags and inside its
// own namespace (LCT_ISA_NS), so no inline function of one ISA can be linked into another.
// The unit says which path it is (LCT_ISA_AVX512, LCT_ISA_AVX2 or neither: generic); the
// compiler's flags only have to allow it (the generic unit may well be built with AVX).
//
//   W         floats per vector
//   V         the vector type
//   exp2(x)   2^x for x < +inf, about 1 ulp; exactly 0 for x < -127 and for -inf (masked scores);
//             NaN stays NaN
//   exp2_softmax(x)   exp2 for a softmax's exponent (a score minus its row's maximum or
//             log-sum-exp: at most 0 up to rounding, below 127 always): exp2's bits from -126
//             up, exactly +0 at -127 and below and for -inf, between them 0 or a denormal;
//             where the ISA allows, fewer instructions than exp2
//   prefetch_l2(p)   asks for p's cache line in L2 (nothing on the generic path)
//   transpose(r)   the W x W matrix of rows r[0..W) transposed in place (row i, lane j
//             becomes row j, lane i): the key blocks' packing, a W x W block at a time
//   load_bf16(p), store_bf16(p, v)   W bf16 values widened to fp32 / rounded from fp32 as
//             to_bf16 does (nearest even, NaN kept quiet), in integer arithmetic on every
//             ISA so that each path stores the same bits
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/bf16.hpp"

#if defined(LCT_ISA_AVX512) && !defined(__AVX512F__)
#error "the avx512 kernels need -march=x86-64-v4"
#endif
#if defined(LCT_ISA_AVX2) && !(defined(__AVX2__) && defined(__FMA__))
#error "the avx2 kernels need -march=x86-64-v3"
#endif

#if defined(LCT_ISA_AVX512) || defined(LCT_ISA_AVX2)
// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_ps() and then warn
// about it (a known false positive); nothing of ours is uninitialised.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

#ifndef LCT_ISA_NS
#error "simd.hpp is included only by the ISA translation units, which define LCT_ISA_NS"
#endif

namespace lct::LCT_ISA_NS {

// 2^f for f in [-0.5, 0.5]: minimax polynomial (Cephes exp2f), relative error about 1e-7.
#define LCT_EXP2_POLY(FMA, SET, f)                                          \
  FMA(FMA(FMA(FMA(FMA(SET(1.535336188319500e-4f), f, SET(1.339887440266574e-3f)), f, \
                  SET(9.618437357674640e-3f)), f, SET(5.550332471162809e-2f)), f,      \
          SET(2.402264791363012e-1f)), f, SET(6.931472028550421e-1f))

#if defined(LCT_ISA_AVX512) || defined(LCT_ISA_AVX2)
// The first two rounds of a W x W transpose of rows r (t: scratch), the same on every x86
// vector width: pairs of rows interleaved (2 x 2 blocks), then 4 x 4 blocks inside each
// 128-bit lane. Each ISA's transpose then moves the lanes.
inline __m256 unpack_lo(__m256 a, __m256 b) { return _mm256_unpacklo_ps(a, b); }
inline __m256 unpack_hi(__m256 a, __m256 b) { return _mm256_unpackhi_ps(a, b); }
template <int I> __m256 shuffle(__m256 a, __m256 b) { return _mm256_shuffle_ps(a, b, I); }
#if defined(LCT_ISA_AVX512)
inline __m512 unpack_lo(__m512 a, __m512 b) { return _mm512_unpacklo_ps(a, b); }
inline __m512 unpack_hi(__m512 a, __m512 b) { return _mm512_unpackhi_ps(a, b); }
template <int I> __m512 shuffle(__m512 a, __m512 b) { return _mm512_shuffle_ps(a, b, I); }
#endif
template <class V, int N>
inline void transpose_in_lanes(V (&r)[N], V (&t)[N]) {
  for (int i = 0; i < N; i += 2) {
    t[i] = unpack_lo(r[i], r[i + 1]);
    t[i + 1] = unpack_hi(r[i], r[i + 1]);
  }
  for (int i = 0; i < N; i += 4) {
    r[i] = shuffle<0x44>(t[i], t[i + 2]);
    r[i + 1] = shuffle<0xEE>(t[i], t[i + 2]);
    r[i + 2] = shuffle<0x44>(t[i + 1], t[i + 3]);
    r[i + 3] = shuffle<0xEE>(t[i + 1], t[i + 3]);
  }
}
#endif

#if defined(LCT_ISA_AVX512)
struct Simd {
  static constexpr int W = 16;
  using V = __m512;
  using Mask = __mmask16;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }  // a * b + c
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  // 16 x 16: 4 x 4 blocks inside each 128-bit lane (transpose_in_lanes), then the lanes
  // moved in two rounds of 128-bit shuffles
  static void transpose(V (&r)[16]) {
    V t[16];
    transpose_in_lanes(r, t);
    for (int i = 0; i < 4; ++i) {
      t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
      t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
      t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
      t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
    }
    for (int i = 0; i < 8; ++i) {
      r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
      r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    }
  }
  static V load_bf16(const bf16* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static void store_bf16(bf16* p, V v) {
    const __m512i u = _mm512_castps_si512(v), one = _mm512_set1_epi32(1);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd));
    r = _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), u, _mm512_set1_epi32(0x400000));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
  }
  static float reduce_max(V v) { return _mm512_reduce_max_ps(v); }
  static float reduce_add(V v) { return _mm512_reduce_add_ps(v); }
  // lanes where the key is visible to the query: same document (>= 0) and qlo <= idx <= qidx
  static Mask visible(const int32_t* kidx, const int32_t* kdoc, int32_t qidx, int32_t qlo, int32_t qdoc) {
    const __m512i i = _mm512_loadu_si512(kidx), d = _mm512_loadu_si512(kdoc);
    return _mm512_cmple_epi32_mask(i, _mm512_set1_epi32(qidx)) &
           _mm512_cmpge_epi32_mask(i, _mm512_set1_epi32(qlo)) &
           _mm512_cmpeq_epi32_mask(d, _mm512_set1_epi32(qdoc));
  }
  static V keep(Mask m, V v, V other) { return _mm512_mask_blend_ps(m, other, v); }
  // 2^x = 2^n p(f) with n = round(x), f = x - n in [-0.5, 0.5]; poly(f) gives p(f). No upper
  // clamp: every caller's x is at most 0 (a score minus the running maximum or the
  // log-sum-exp), and scalef rounds a finite x past 128 to inf on its own (+inf gives NaN).
  // Two instructions fewer per vector than clamping both sides and zeroing separately.
  template <class Poly>
  static V exp2_reduced(V x, Poly&& poly) {
    const V lo = set1(-127.0f);
    const Mask under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_max_ps(lo, x);  // operand order: a NaN x passes through
    const V n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_maskz_scalef_ps(Mask(~under), poly(sub(x, n)), n);  // 0 where x < -127
  }
  static V exp2(V x) {
    return exp2_reduced(x, [](V f) { return fma(LCT_EXP2_POLY(fma, set1, f), f, set1(1.0f)); });
  }
  static V exp2_softmax(V x) { return exp2(x); }
  static void prefetch_l2(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1); }
  // 2^x to 7.5e-5 relative (a degree-3 minimax polynomial, three FMAs fewer than exp2): for
  // a p that is rounded to bf16 (2^-9 relative, 26 times that) before its product. Degree 4
  // (3e-6) made the bf16 forward's exponentials cost 3 points of its peak less on Zen 5 than
  // exp2, degree 3 the tiles 0.7% less again (in-process A/B). f = x - floor(x)
  // in one instruction (vreduceps), and scalef takes floor(x) from x itself: two instructions
  // fewer than exp2's range reduction (0.7% of the bf16 forward tile, in-process A/B on Zen
  // 5). Exactly +0 for -inf and below -151; between that and -126, 0 or a denormal.
  static V exp2_bf16(V x) {
    x = _mm512_max_ps(set1(-200.0f), x);  // -inf to a finite exponent; a NaN x passes through
    const V f = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);  // [0, 1)
    // 2^f on [0, 1): the polynomial of least relative error there (a linear program's, on 4,000
    // points; float32 Horner evaluation measured 7.49e-5)
    const V g = fma(fma(fma(set1(0.07802474498748779f), f, set1(0.22606715559959412f)), f,
                        set1(0.6958333253860474f)), f, set1(0.9999252557754517f));
    return _mm512_scalef_ps(g, x);  // g * 2^floor(x)
  }
};
#elif defined(LCT_ISA_AVX2)
struct Simd {
  static constexpr int W = 8;
  using V = __m256;
  using Mask = __m256;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  // 8 x 8: 4 x 4 blocks inside each 128-bit half (transpose_in_lanes), then halves swapped
  static void transpose(V (&r)[8]) {
    V t[8];
    transpose_in_lanes(r, t);
    for (int i = 0; i < 4; ++i) {
      t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
      t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
    }
    for (int i = 0; i < 8; ++i) r[i] = t[i];
  }
  static V load_bf16(const bf16* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static void store_bf16(bf16* p, V v) {
    const __m256i u = _mm256_castps_si256(v), one = _mm256_set1_epi32(1);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan);
    r = _mm256_srli_epi32(r, 16);  // every lane now fits 16 bits: the unsigned pack keeps it
    const __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
  }
  static float reduce_max(V v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }
  static float reduce_add(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static Mask visible(const int32_t* kidx, const int32_t* kdoc, int32_t qidx, int32_t qlo, int32_t qdoc) {
    const __m256i i = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kidx));
    const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kdoc));
    const __m256i later = _mm256_cmpgt_epi32(i, _mm256_set1_epi32(qidx));
    const __m256i older = _mm256_cmpgt_epi32(_mm256_set1_epi32(qlo), i);
    const __m256i same = _mm256_cmpeq_epi32(d, _mm256_set1_epi32(qdoc));
    return _mm256_castsi256_ps(_mm256_andnot_si256(_mm256_or_si256(later, older), same));
  }
  static V keep(Mask m, V v, V other) { return _mm256_blendv_ps(other, v, m); }
  // 2^x for x <= 127 (a softmax's exponent; exp2 clamps to it). n = round(x) by the
  // 1.5 * 2^23 trick: the sum's low bits are n, so n << 23 needs no conversion, and 2^n * p
  // is one integer add to p's exponent. At the lower clamp n = -127 and f = 0, so p = 1.0
  // exactly and the add gives +0.0 for -127, -inf and anything below; between -127 and -126
  // the result is a denormal below 2^-126 (exp2 gives 0 there).
  static V exp2_softmax(V x) {
    const V magic = set1(12582912.0f);
    x = _mm256_max_ps(set1(-127.0f), x);  // operand order: a NaN x passes through
    const V t = add(x, magic);
    const V f = sub(x, sub(t, magic));
    const V p = fma(LCT_EXP2_POLY(fma, set1, f), f, set1(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(t), 23);
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
  }
  // exp2_softmax clamped to 127 above and zeroed below -126, so the result is always a
  // normal float or 0 (3 instructions more: for arguments of either sign, as SwiGLU's).
  static V exp2(V x) {
    const V under = _mm256_cmp_ps(x, set1(-126.0f), _CMP_LT_OQ);
    return _mm256_andnot_ps(under, exp2_softmax(_mm256_min_ps(set1(127.0f), x)));  // min: a NaN x passes through
  }
  static void prefetch_l2(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1); }
};
#else
// Portable scalar path: any CPU, any head dimension.
struct Simd {
  static constexpr int W = 1;
  using V = float;
  using Mask = bool;
  static V zero() { return 0.0f; }
  static V set1(float x) { return x; }
  static V load(const float* p) { return *p; }
  static void store(float* p, V v) { *p = v; }
  static V fma(V a, V b, V c) { return a * b + c; }
  static V mul(V a, V b) { return a * b; }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V div(V a, V b) { return a / b; }
  static V max(V a, V b) { return a < b ? b : a; }
  static void transpose(V (&)[1]) {}
  static V load_bf16(const bf16* p) { return to_f32(*p); }
  static void store_bf16(bf16* p, V v) { *p = to_bf16(v); }
  static float reduce_max(V v) { return v; }
  static float reduce_add(V v) { return v; }
  static Mask visible(const int32_t* kidx, const int32_t* kdoc, int32_t qidx, int32_t qlo, int32_t qdoc) {
    return *kidx <= qidx && *kidx >= qlo && *kdoc == qdoc;
  }
  static V keep(Mask m, V v, V other) { return m ? v : other; }
  static V exp2(V x) { return std::exp2(x); }
  static V exp2_softmax(V x) { return std::exp2(x); }
  static void prefetch_l2(const void*) {}
};
#endif

}  // namespace lct::LCT_ISA_NS
