// Flash-attention tiles with bf16 operands on AVX512_BF16: every product is vdpbf16ps (16
// fp32 lanes, each += a0 b0 + a1 b1), so operands are stored with the reduction dimension in
// pairs. Scores, the softmax statistics, accumulators and gradients stay fp32; p and dS are
// rounded to bf16 only as operands of the next product (as FlashAttention-2 does).
//
// Layouts (pairs of the reduction index adjacent; np, D and the row count are even):
//   kt2, vt2  [D/2][np][2]   keys / values transposed: pairs of head dimensions
//   k2, v2    [np/2][D][2]   keys / values: pairs of keys
//   q, dout   [rows][D]      row-major: pairs of head dimensions are adjacent already
//   q2, dout2 [rows/2][D][2] pairs of query rows
//   p, ds     [rows][np]     row-major bf16 (pairs of keys adjacent)
//   pi, dsi   [rows/2][np][2] pairs of query rows
// Strips are RT = 4 rows: with 6, as the fp32 tiles have, these lost 1-3 points of their
// peak (each vdpbf16ps already does two multiply-adds per lane per load).
// Included after flash_tiles.hpp (its Simd, Shape, helpers) by isa_avx512bf16.cpp only.
#pragma once

#include "common/bf16.hpp"

namespace lct::LCT_ISA_NS {

static_assert(W == 16 && NV % 2 == 0 && RT % 2 == 0, "the bf16 tiles assume AVX-512 and even shapes");

inline __m512bh bcast_pair(const bf16* p) {
  int32_t x;
  std::memcpy(&x, p, 4);
  return (__m512bh)_mm512_set1_epi32(x);
}
inline __m512bh load_pairs(const bf16* p) { return (__m512bh)_mm512_loadu_si512(p); }

// s[RT][N] = a[RT][K] . bt2[K/2][N W][2]; a row stride lda, bt2 row stride ldb (elements).
template <int N>
inline void mk_abt_bf16(const bf16* a, int64_t lda, const bf16* bt2, int64_t ldb, int64_t K,
                        V (&s)[RT][N]) {
  LCT_UNROLL for (int r = 0; r < RT; ++r)
    LCT_UNROLL for (int v = 0; v < N; ++v) s[r][v] = Simd::zero();
  for (int64_t i = 0; i < K / 2; ++i) {
    __m512bh b[N];
    LCT_UNROLL for (int v = 0; v < N; ++v) b[v] = load_pairs(bt2 + i * ldb + v * 2 * W);
    LCT_UNROLL for (int r = 0; r < RT; ++r) {
      const __m512bh x = bcast_pair(a + r * lda + 2 * i);
      LCT_UNROLL for (int v = 0; v < N; ++v) s[r][v] = _mm512_dpbf16_ps(s[r][v], x, b[v]);
    }
  }
}

// c[RT][DC] = (scale ? c * scale[r] : zero_c ? 0 : c) + p[RT][K] . b2[K/2][DC][2]; with add
// not 0 (and zero_c), c += add * (p . b2) instead
template <int DC>
inline void mk_ab_bf16(const bf16* p, int64_t ldp, const bf16* b2, int64_t ldb, int64_t K,
                       float* c, int64_t ldc, const float* scale, bool zero_c, float add = 0.0f) {
  V acc[RT][DC];
  load_acc(acc, c, ldc, scale, zero_c);
  for (int64_t j = 0; j < K / 2; ++j) {
    __m512bh bb[DC];
    LCT_UNROLL for (int v = 0; v < DC; ++v) bb[v] = load_pairs(b2 + j * ldb + v * 2 * W);
    LCT_UNROLL for (int r = 0; r < RT; ++r) {
      const __m512bh x = bcast_pair(p + r * ldp + 2 * j);
      LCT_UNROLL for (int v = 0; v < DC; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], x, bb[v]);
    }
  }
  store_or_add_acc(acc, c, ldc, add);
}

// c[KC][DC] += a2[rows/2][KC][2]^T . b2[rows/2][DC][2]  (pairs of rows)
template <int DC>
inline void mk_atb_bf16(const bf16* a2, int64_t lda, const bf16* b2, int64_t ldb, int64_t rows,
                        float* c, int64_t ldc) {
  V acc[KC][DC];
  load_acc(acc, c, ldc, nullptr, false);
  for (int64_t i = 0; i < rows / 2; ++i) {
    __m512bh bb[DC];
    LCT_UNROLL for (int v = 0; v < DC; ++v) bb[v] = load_pairs(b2 + i * ldb + v * 2 * W);
    LCT_UNROLL for (int k = 0; k < KC; ++k) {
      const __m512bh x = bcast_pair(a2 + i * lda + 2 * k);
      LCT_UNROLL for (int v = 0; v < DC; ++v) acc[k][v] = _mm512_dpbf16_ps(acc[k][v], x, bb[v]);
    }
  }
  store_acc(acc, c, ldc);
}

// The leading rows [0, first) of a masked tile whose idx is below key_min, the least idx of a
// group of keys: they see none of the group, so their P and dS there are exactly 0. Groups
// come in order of idx on the causal diagonal, so each scan goes on from the previous
// group's answer and passes every row once a tile; a group with a smaller key_min (keys out
// of order) starts it again.
struct RowsBefore {
  int64_t first = 0;
  int32_t kmin = INT32_MIN;
  template <class Tile>
  int64_t advance(const Tile& t, int32_t key_min) {
    if (key_min < kmin) first = 0;
    kmin = key_min;
    while (first < t.rows && t.qidx[first] < key_min) ++first;
    return first;
  }
};

// p from a score of q . kt2, which kt2 does not scale, and its row's offset (softmax_known's
// exp2): 2^(s kscale + offset) in one FMA, for p rounded to bf16 next (exp2_bf16). Scaling
// every score first took a multiply a vector more (1.5% of the forward tile on Zen 5).
struct Exp2Scaled {
  V kscale;
  V operator()(V s, V offset) const { return Simd::exp2_bf16(Simd::fma(s, kscale, offset)); }
};

// RT rows of N fp32 vectors to bf16, row-major at dst (row stride ld).
template <int N>
inline void store_rows_bf16(const V (&s)[RT][N], bf16* dst, int64_t ld) {
  LCT_UNROLL for (int r = 0; r < RT; ++r)
    LCT_UNROLL for (int v = 0; v < N; v += 2)
      _mm512_storeu_si512(dst + r * ld + v * W, (__m512i)_mm512_cvtne2ps_pbh(s[r][v + 1], s[r][v]));
}

// Rows (2i, 2i+1) of RT rows to bf16, interleaved: dst[(i * ld) + 2c + e] = s[2i + e][c].
template <int N>
inline void store_row_pairs_bf16(const V (&s)[RT][N], bf16* dst, int64_t ld) {
  alignas(64) static constexpr uint16_t kZip[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                                    8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i zip = _mm512_load_si512(kZip);
  LCT_UNROLL for (int r = 0; r < RT; r += 2)
    LCT_UNROLL for (int v = 0; v < N; ++v) {
      const __m512i two = (__m512i)_mm512_cvtne2ps_pbh(s[r + 1][v], s[r][v]);  // row r | row r+1
      _mm512_storeu_si512(dst + (r / 2) * ld + 2 * v * W, _mm512_permutexvar_epi16(zip, two));
    }
}

// pair_products.hpp's transpose_pairs into [D/2][np][2] (zero from row n), through registers:
// a row's pair of values is one 32-bit word, so 16 rows by 16 pairs transpose as fp32 words
// do (moves only: any bits). The plain loop was 2% of a bf16 forward+backward at 4,096 tokens.
void transpose_pairs_bf16(const bf16* x, int64_t ld, int64_t n, int64_t np, int64_t D, bf16* out) {
  const int64_t words = D / 2;
  for (int64_t c0 = 0; c0 < np; c0 += W) {
    int64_t i0 = 0;
    for (; i0 + W <= words; i0 += W) {
      V r[W];
      LCT_UNROLL for (int c = 0; c < W; ++c)
        r[c] = c0 + c < n ? _mm512_castsi512_ps(_mm512_loadu_si512(x + (c0 + c) * ld + 2 * i0)) : Simd::zero();
      Simd::transpose(r);
      LCT_UNROLL for (int i = 0; i < W; ++i)
        _mm512_storeu_si512(out + (i0 + i) * 2 * np + 2 * c0, _mm512_castps_si512(r[i]));
    }
    for (; i0 < words; ++i0)  // D/2 not a multiple of 16: the last 8 pairs one by one
      for (int64_t c = c0; c < c0 + W; ++c) {
        out[i0 * 2 * np + 2 * c] = c < n ? x[c * ld + 2 * i0] : bf16{};
        out[i0 * 2 * np + 2 * c + 1] = c < n ? x[c * ld + 2 * i0 + 1] : bf16{};
      }
  }
}

// pair_products.hpp's interleave_rows into [np/2][D][2] (zero from row n): rows 2i and 2i + 1,
// 32 values at a time through two two-source word permutes.
void interleave_rows_bf16(const bf16* x, int64_t ld, int64_t n, int64_t np, int64_t D, bf16* out) {
  alignas(64) int16_t lo[32], hi[32];
  for (int j = 0; j < 32; ++j) {  // output word j: a[j / 2] (j even) or b[j / 2] (j odd); hi: + 16
    lo[j] = int16_t((j / 2) + (j % 2 ? 32 : 0));
    hi[j] = int16_t(16 + (j / 2) + (j % 2 ? 32 : 0));
  }
  const __m512i ilo = _mm512_load_si512(lo), ihi = _mm512_load_si512(hi);
  for (int64_t r = 0; r < np; r += 2) {
    bf16* o = out + r * D;  // pair row r / 2: 2D values
    if (r >= n) {
      std::fill(o, o + 2 * D, bf16{});
      continue;
    }
    const bf16* a = x + r * ld;
    const bf16* b = r + 1 < n ? a + ld : nullptr;  // never read past the block
    int64_t c = 0;
    for (; c + 32 <= D; c += 32) {
      const __m512i va = _mm512_loadu_si512(a + c), vb = b ? _mm512_loadu_si512(b + c) : _mm512_setzero_si512();
      _mm512_storeu_si512(o + 2 * c, _mm512_permutex2var_epi16(va, ilo, vb));
      _mm512_storeu_si512(o + 2 * c + 32, _mm512_permutex2var_epi16(va, ihi, vb));
    }
    for (; c < D; ++c) {
      o[2 * c] = a[c];
      o[2 * c + 1] = b ? b[c] : bf16{};
    }
  }
}

// The fp32 forward's strip (flash_tiles.hpp) with bf16 products: scores and the softmax in
// fp32, p rounded to bf16 as it is stored for p . v (so its exponentials need only
// exp2_bf16's 7.5e-5; the row sums take the same p). The backward recomputes P with exp2_bf16
// too: P and dS = P (dP - delta) are rounded to bf16 before every product they enter.
void flash_fwd_tile_bf16(const FlashFwdTileBf16& t) {
  const int64_t D = t.D, np = t.np;
  float* s = t.scores;  // [RT][np] fp32 scores, not scaled
  bf16* p = t.scratch;  // [RT][np] their p
  const Exp2Scaled exp2{Simd::set1(t.kscale)};
  for (int64_t r0 = 0; r0 < t.rows; r0 += RT) {
    const int64_t cols = visible_end<RT>(t, r0);
    if (cols == 0) continue;  // nothing visible: m, l and acc stay as they are
    V mx[RT];
    strip_scores(t, r0, cols, s, mx, [&](int64_t c0, auto& sc) {
      mk_abt_bf16(t.q + r0 * t.ldq, t.ldq, t.kt2 + 2 * c0, 2 * np, D, sc);
    });
    // the running maxima in log2 units: max(s) kscale is the max of s kscale (rounding keeps
    // order, kscale > 0), as exact as scaling every score first
    LCT_UNROLL for (int r = 0; r < RT; ++r) mx[r] = Simd::mul(mx[r], exp2.kscale);
    float corr[RT], shift[RT];
    update_max(mx, t.m + r0, corr, shift);
    exp_strip(s, np, cols, shift, corr, t.l + r0,
              [&](int r, int64_t c, V p0, V p1) {
                _mm512_storeu_si512(p + r * np + c, (__m512i)_mm512_cvtne2ps_pbh(p1, p0));
              },
              exp2);
    over_d<Shape::DC>(D, [&](int64_t d0, auto dc) {
      mk_ab_bf16<decltype(dc)::value>(p, np, t.v2 + 2 * d0, 2 * D, cols, t.acc + r0 * D + d0, D,
                                      corr, false);
    });
  }
}

void flash_bwd_tile_bf16(const FlashBwdTileBf16& t) {
  const int64_t D = t.D, np = t.np;
  const Exp2Scaled exp2{Simd::set1(t.kscale)};
  // Phase A, per strip: P = 2^(s - lse2), dS = P * (dP - delta), dq = dS k, over the key
  // chunks the strip may see; phase B reads zeros for the rest.
  for (int64_t r0 = 0; r0 < t.rows; r0 += RT) {
    const int64_t cols = visible_end<RT>(t, r0);
    for (int64_t i = r0 / 2; i < (r0 + RT) / 2; ++i) {
      std::fill(t.pi + i * 2 * np + 2 * cols, t.pi + (i + 1) * 2 * np, bf16{});
      std::fill(t.dsi + i * 2 * np + 2 * cols, t.dsi + (i + 1) * 2 * np, bf16{});
    }
    over_chunks(cols, [&](int64_t c0, auto n) {
      constexpr int N = decltype(n)::value;
      V s[RT][N];
      mk_abt_bf16(t.q + r0 * t.ldq, t.ldq, t.kt2 + 2 * c0, 2 * np, D, s);
      if (t.masked) mask_scores(s, t.kidx + c0, t.kdoc + c0, t.qidx + r0, t.qlo + r0, t.qdoc + r0);
      softmax_known(s, t.lse2 + r0, exp2);  // P and dS: bf16 operands
      LCT_UNROLL for (int r = 0; r < RT; ++r)
        LCT_UNROLL for (int v = 0; v < N; ++v) Simd::store(t.p + r * NC + v * W, s[r][v]);
      store_row_pairs_bf16(s, t.pi + (r0 / 2) * 2 * np + 2 * c0, 2 * np);
      mk_abt_bf16(t.dout + r0 * t.ldq, t.ldq, t.vt2 + 2 * c0, 2 * np, D, s);  // s now holds dP
      LCT_UNROLL for (int r = 0; r < RT; ++r) {
        const V dl = Simd::set1(t.delta[r0 + r]);
        LCT_UNROLL for (int v = 0; v < N; ++v)
          s[r][v] = Simd::mul(Simd::load(t.p + r * NC + v * W), Simd::sub(s[r][v], dl));
      }
      store_rows_bf16(s, t.ds + r0 * np + c0, np);
      store_row_pairs_bf16(s, t.dsi + (r0 / 2) * 2 * np + 2 * c0, 2 * np);
    });
    const int64_t lddq = t.lddq ? t.lddq : D;
    over_d<Shape::DC>(D, [&](int64_t d0, auto dc) {
      mk_ab_bf16<decltype(dc)::value>(t.ds + r0 * np, np, t.k2 + 2 * d0, 2 * D, cols,
                                      t.dq + r0 * lddq + d0, lddq, nullptr, true, t.dq_add);
    });
  }
  // Phase B, per group of KC keys over the block's rows: dv += P^T dout, dk += dS^T q. In a
  // masked tile, the leading rows that come before all of a group's keys add only zeros and
  // are left out, in pairs (on the causal diagonal, nearly half of the tile's phase B).
  RowsBefore before;
  for (int64_t k0 = 0; k0 < np; k0 += KC) {
    const int64_t r0 = t.masked ? before.advance(t, least_key_idx(t.kidx, k0, KC)) / 2 * 2 : 0;
    if (r0 == t.rows) continue;
    over_d<Shape::DB>(D, [&](int64_t d0, auto dc) {
      mk_atb_bf16<decltype(dc)::value>(t.pi + r0 * np + 2 * k0, 2 * np, t.dout2 + r0 * D + 2 * d0, 2 * D,
                                       t.rows - r0, t.dv + k0 * D + d0, D);
      mk_atb_bf16<decltype(dc)::value>(t.dsi + r0 * np + 2 * k0, 2 * np, t.q2 + r0 * D + 2 * d0, 2 * D,
                                       t.rows - r0, t.dk + k0 * D + d0, D);
    });
  }
}

}  // namespace lct::LCT_ISA_NS
