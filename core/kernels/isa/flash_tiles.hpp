// Flash-attention tiles for one ISA (the Simd of the including translation unit), fp32.
// The including file defines LCT_ISA_NS and includes simd.hpp and shape.hpp, whose
//   struct Shape { R (query rows per strip, 4 or more), NV (vectors per key chunk),
//                  DC (vectors of D per output pass), KC (keys per dK/dV pass),
//                  DB (vectors of D per dK/dV pass) };
// makes the accumulators of every micro-kernel fit the ISA's registers.
//
// Micro-kernels (all row-major, leading dimensions given):
//   mk_abt  s[R][NC]  = a[R][K] . bt[K][NC]        scores (q kt), dP (dout vt)
//   mk_ab   c[R][DC]  = c * scale + p[R][K] . b[K][DC]      o += p v, dq = ds k
//   mk_atb  c[KC][DC] += a[rows][KC]^T . b[rows][DC]        dv += p^T dout, dk += ds^T q
// A tile's rows are a multiple of RT = 4: strips of R rows, the last one or two of RT rows
// when R does not divide them, so that query blocks stay 128 rows whatever R is (126- or
// 132-row blocks cut across the 128-key blocks and packed documents' boundaries).
// Forward: per strip of R query rows, the scores of the whole key block are made chunk by
// chunk (NC keys in registers, masked there) into L1 (R x np floats); the online softmax
// then takes one max, one rescale and one sum per row per tile, not per chunk, and p . v
// runs over all np keys with its accumulators loaded and stored once.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/isa/kernels.hpp"

namespace lct::LCT_ISA_NS {

using V = Simd::V;
constexpr int W = Simd::W, R = Shape::R, RT = 4, NV = Shape::NV, NC = NV * W, KC = Shape::KC;
// A masked strip's visible keys end on a half chunk where the half is still an even number
// of vectors (AVX-512: 32 keys), else on a whole chunk (visible_end).
constexpr int NH = NV % 4 == 0 ? NV / 2 : NV, NCUT = NH * W;
static_assert(R >= RT, "a strip has at least RT rows");
static_assert(NV % 2 == 0 && NH % 2 == 0, "the softmax takes a chunk's vectors two at a time");
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

#define LCT_UNROLL _Pragma("GCC unroll 32")
// The loops over K of the scores', p . v's and dQ's micro-kernels, by 4 on the avx2 path: on
// a Zen 3 core the fp32 forward tile ran 1.01-1.12x faster and the backward tile 1.02-1.06x
// (in one process, key blocks in L2 and in L3); the dK/dV loop unrolled as well was slower.
// Not measured on the AVX-512 paths, which keep the plain loops.
#if defined(LCT_ISA_AVX2)
#define LCT_UNROLL_K _Pragma("GCC unroll 4")
#else
#define LCT_UNROLL_K
#endif

template <int ROWS, int N>  // N vectors of keys: a chunk (NV) or its first half (NH)
inline void mk_abt(const float* a, int64_t lda, const float* bt, int64_t ldb, int64_t K,
                   V (&s)[ROWS][N]) {
  LCT_UNROLL for (int r = 0; r < ROWS; ++r)
    LCT_UNROLL for (int v = 0; v < N; ++v) s[r][v] = Simd::zero();
  LCT_UNROLL_K for (int64_t k = 0; k < K; ++k) {
    V b[N];
    LCT_UNROLL for (int v = 0; v < N; ++v) b[v] = Simd::load(bt + k * ldb + v * W);
    LCT_UNROLL for (int r = 0; r < ROWS; ++r) {
      const V x = Simd::set1(a[r * lda + k]);
      LCT_UNROLL for (int v = 0; v < N; ++v) s[r][v] = Simd::fma(x, b[v], s[r][v]);
    }
  }
}

// An output block's accumulators from c (ROWS x DC vectors): zero, c * scale[row], or c.
template <int ROWS, int DC>
inline void load_acc(V (&acc)[ROWS][DC], const float* c, int64_t ldc, const float* scale, bool zero_c) {
  LCT_UNROLL for (int r = 0; r < ROWS; ++r) {
    LCT_UNROLL for (int v = 0; v < DC; ++v) {
      if (zero_c) acc[r][v] = Simd::zero();
      else if (scale) acc[r][v] = Simd::mul(Simd::load(c + r * ldc + v * W), Simd::set1(scale[r]));
      else acc[r][v] = Simd::load(c + r * ldc + v * W);
    }
  }
}

template <int ROWS, int DC>
inline void store_acc(const V (&acc)[ROWS][DC], float* c, int64_t ldc) {
  LCT_UNROLL for (int r = 0; r < ROWS; ++r)
    LCT_UNROLL for (int v = 0; v < DC; ++v) Simd::store(c + r * ldc + v * W, acc[r][v]);
}

// c = acc, or with add not 0, c += add * acc (one multiply-add per value)
template <int ROWS, int DC>
inline void store_or_add_acc(const V (&acc)[ROWS][DC], float* c, int64_t ldc, float add) {
  if (add == 0.0f) return store_acc(acc, c, ldc);
  const V a = Simd::set1(add);
  LCT_UNROLL for (int r = 0; r < ROWS; ++r)
    LCT_UNROLL for (int v = 0; v < DC; ++v) {
      float* x = c + r * ldc + v * W;
      Simd::store(x, Simd::fma(a, acc[r][v], Simd::load(x)));
    }
}

// c = (scale ? c * scale[r] : zero_c ? 0 : c) + p . b over K keys, ROWS x DC vectors; with
// add not 0 (and zero_c), c += add * (p . b) instead (store_or_add_acc).
// A call, not inlined: inlined into the forward strip, its row pointers and strides were
// kept on the stack and reloaded on every key (GCC 12), 11% off the fp32 forward tile.
template <int ROWS, int DC>
__attribute__((noinline)) void mk_ab(const float* p, int64_t ldp, const float* b, int64_t ldb,
                                     int64_t K, float* c, int64_t ldc, const float* scale,
                                     bool zero_c, float add = 0.0f) {
  V acc[ROWS][DC];
  load_acc(acc, c, ldc, scale, zero_c);
  LCT_UNROLL_K for (int64_t k = 0; k < K; ++k) {
    V bb[DC];
    LCT_UNROLL for (int v = 0; v < DC; ++v) bb[v] = Simd::load(b + k * ldb + v * W);
    LCT_UNROLL for (int r = 0; r < ROWS; ++r) {
      const V x = Simd::set1(p[r * ldp + k]);
      LCT_UNROLL for (int v = 0; v < DC; ++v) acc[r][v] = Simd::fma(x, bb[v], acc[r][v]);
    }
  }
  store_or_add_acc(acc, c, ldc, add);
}

template <int DC>
inline void mk_atb(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows,
                   float* c, int64_t ldc) {
  V acc[KC][DC];
  load_acc(acc, c, ldc, nullptr, false);
  for (int64_t r = 0; r < rows; ++r) {
    V bb[DC];
    LCT_UNROLL for (int v = 0; v < DC; ++v) bb[v] = Simd::load(b + r * ldb + v * W);
    LCT_UNROLL for (int k = 0; k < KC; ++k) {
      const V x = Simd::set1(a[r * lda + k]);
      LCT_UNROLL for (int v = 0; v < DC; ++v) acc[k][v] = Simd::fma(x, bb[v], acc[k][v]);
    }
  }
  store_acc(acc, c, ldc);
}

// Runs f(d0, width) over the head dimension in passes of at most MAX vectors (4, 3, 2, 1),
// the width a compile-time constant.
template <int MAX, class F>
inline void over_d(int64_t D, F&& f) {
  int64_t d0 = 0;
  if constexpr (MAX >= 4)
    for (; d0 + 4 * W <= D; d0 += 4 * W) f(d0, std::integral_constant<int, 4>());
  if constexpr (MAX == 3)
    for (; d0 + 3 * W <= D; d0 += 3 * W) f(d0, std::integral_constant<int, 3>());
  if constexpr (MAX >= 2)
    for (; d0 + 2 * W <= D; d0 += 2 * W) f(d0, std::integral_constant<int, 2>());
  for (; d0 + W <= D; d0 += W) f(d0, std::integral_constant<int, 1>());
}

// A key block's layouts (kernels.hpp's KeyBlockLayout): kt and vt in chunks of NC keys (where
// the chunk from key c0 starts; its rows are NC floats); k and v in panels of the widest over_d
// pass (the offset of dimension d0's column in its panel, and the panel's row stride). Every
// pass of over_d<DC> lies inside one panel (the full ones, then the rest in the last).
constexpr int64_t kPanel = int64_t(Shape::DC) * W;
inline int64_t chunk_offset(int64_t D, int64_t c0) { return KeyBlockLayout{D, 0, NC, kPanel}.chunked(0, c0); }
inline int64_t panel_offset(int64_t D, int64_t np, int64_t d0) {
  return KeyBlockLayout{D, np, NC, kPanel}.in_panels(0, d0);
}
inline int64_t panel_stride(int64_t D, int64_t d0) {
  return KeyBlockLayout{D, 0, NC, kPanel}.panel_width(d0);
}

// A key block's n rows of D (row stride ld; fp32 or bf16) times mult into the chunked layout
// of kt and vt, zero from row n to np: W keys by W dimensions at a time, through registers.
// The plain loop (a strided read per value) took 6x as long on Zen 5, about 3% of the forward at
// 4,096 tokens with 8 KV heads. The one multiply per value is the plain loop's: same bits.
template <class T>
void transpose_keys(const T* x, int64_t ld, int64_t n, int64_t D, int64_t np, float mult, float* out) {
  const V scale = Simd::set1(mult);
  for (int64_t c0 = 0; c0 < np; c0 += W)
    for (int64_t i0 = 0; i0 < D; i0 += W) {
      V r[W];
      LCT_UNROLL for (int c = 0; c < W; ++c) {
        const T* row = x + (c0 + c) * ld + i0;
        V v = Simd::zero();
        if (c0 + c < n) {
          if constexpr (std::is_same_v<T, float>) v = Simd::load(row);
          else v = Simd::load_bf16(row);
        }
        r[c] = Simd::mul(v, scale);
      }
      Simd::transpose(r);
      float* o = out + chunk_offset(D, c0) + i0 * NC;
      LCT_UNROLL for (int i = 0; i < W; ++i) Simd::store(o + i * NC, r[i]);
    }
}
void transpose_keys_f32(const float* x, int64_t ld, int64_t n, int64_t D, int64_t np, float mult, float* out) {
  transpose_keys(x, ld, n, D, np, mult, out);
}
void transpose_keys_bf16(const bf16* x, int64_t ld, int64_t n, int64_t D, int64_t np, float mult, float* out) {
  transpose_keys(x, ld, n, D, np, mult, out);
}

// Runs f(r0, rows) over a tile's strips, rows a compile-time constant: R rows each, then
// one or two of RT rows where R does not divide `rows` (a multiple of RT).
template <class F>
inline void over_strips(int64_t rows, F&& f) {
  int64_t tail = rows % R;
  while (tail % RT != 0) tail += R;  // R = 6: a remainder of 2 becomes 8 (two strips of 4)
  int64_t r0 = 0;
  for (; r0 < rows - tail; r0 += R) f(r0, std::integral_constant<int, R>());
  if constexpr (R != RT)
    for (; r0 < rows; r0 += RT) f(r0, std::integral_constant<int, RT>());
}

template <int ROWS, int N>
inline void mask_scores(V (&s)[ROWS][N], const int32_t* kidx, const int32_t* kdoc,
                        const int32_t* qidx, const int32_t* qlo, const int32_t* qdoc) {
  LCT_UNROLL for (int r = 0; r < ROWS; ++r)
    LCT_UNROLL for (int v = 0; v < N; ++v)
      s[r][v] = Simd::keep(Simd::visible(kidx + v * W, kdoc + v * W, qidx[r], qlo[r], qdoc[r]),
                           s[r][v], Simd::set1(kNegInf));
}

// p = 2^(s - lse2) for ROWS rows (backward: the softmax is known, nothing to track):
// exp2(s, -lse2) gives p from a score and its row's offset (the fp32 tiles' 2^(s + offset),
// the bf16 tiles' 2^(s kscale + offset): their scores are not scaled yet).
template <int ROWS, int N, class Exp2>
inline void softmax_known(V (&s)[ROWS][N], const float* lse2, Exp2&& exp2) {
  LCT_UNROLL for (int r = 0; r < ROWS; ++r) {
    const V offset = Simd::set1(-lse2[r]);
    LCT_UNROLL for (int v = 0; v < N; ++v) s[r][v] = exp2(s[r][v], offset);
  }
}
// The fp32 tiles' p from a score (log2 units: the keys carry the scale) and its row's offset.
inline V exp2_shifted(V s, V offset) { return Simd::exp2_softmax(Simd::add(s, offset)); }

// Runs f(c0, n) over the key columns [0, cols) in chunks, n the chunk's vectors as a
// compile-time constant: NV each, then NH where cols ends on a half chunk (visible_end).
template <class F>
inline void over_chunks(int64_t cols, F&& f) {
  int64_t c0 = 0;
  for (; c0 + NC <= cols; c0 += NC) f(c0, std::integral_constant<int, NV>());
  if constexpr (NH != NV)
    if (c0 < cols) f(c0, std::integral_constant<int, NH>());
}

// The key columns [0, end) of a tile that a strip of ROWS rows from r0 may see, in steps of
// NCUT keys (half a chunk on AVX-512): trailing steps none of whose keys any row can see are
// left out (on the causal diagonal, the keys past the strip's last row, rounded up to 32: 3/8
// of a 128 x 128 tile). A key can be seen only by a row of its document at an idx at or
// after it, so a step whose every key of the strip's documents comes after the strip's last
// idx is left out. Their scores would be -inf and p exactly 0, so leaving them out changes
// no bit.
template <int ROWS, class Tile>
inline int64_t visible_end(const Tile& t, int64_t r0) {
  if (!t.masked) return t.np;
  int32_t qmax = INT32_MIN, dmin = INT32_MAX, dmax = INT32_MIN;
  for (int r = 0; r < ROWS; ++r) {
    qmax = std::max(qmax, t.qidx[r0 + r]);
    dmin = std::min(dmin, t.qdoc[r0 + r]);
    dmax = std::max(dmax, t.qdoc[r0 + r]);
  }
  int64_t end = t.np;
  for (; end > 0; end -= NCUT) {
    bool seen = false;
    for (int64_t c = end - NCUT; c < end; ++c)
      seen |= t.kdoc[c] >= dmin && t.kdoc[c] <= dmax && t.kidx[c] <= qmax;
    if (seen) break;
  }
  return end;
}

// The least idx of keys [c0, c0 + n): a row whose idx is below it sees none of them (a row
// sees only keys at or before its own idx), so their P and dS in that row are exactly 0.
inline int32_t least_key_idx(const int32_t* kidx, int64_t c0, int64_t n) {
  int32_t least = INT32_MAX;
  for (int64_t c = c0; c < c0 + n; ++c) least = std::min(least, kidx[c]);
  return least;
}

// A strip's scores for key columns [0, cols) (ROWS x cols, log2 units) into s, chunk by chunk
// (scores(c0, sc) makes a chunk's in registers, masked there), and each row's running
// maximum as a vector, so the softmax needs no extra pass over s to find it. Tile: the fp32
// or bf16 forward tile (the same tags).
template <int ROWS, class Tile, class Scores>
inline void strip_scores(const Tile& t, int64_t r0, int64_t cols, float* s, V (&mx)[ROWS],
                         Scores&& scores) {
  LCT_UNROLL for (int r = 0; r < ROWS; ++r) mx[r] = Simd::set1(kNegInf);
  over_chunks(cols, [&](int64_t c0, auto n) {
    constexpr int N = decltype(n)::value;
    V sc[ROWS][N];
    scores(c0, sc);
    if (t.masked) mask_scores(sc, t.kidx + c0, t.kdoc + c0, t.qidx + r0, t.qlo + r0, t.qdoc + r0);
    LCT_UNROLL for (int r = 0; r < ROWS; ++r)
      LCT_UNROLL for (int v = 0; v < N; ++v) {
        mx[r] = Simd::max(mx[r], sc[r][v]);
        Simd::store(s + r * t.np + c0 + v * W, sc[r][v]);
      }
  });
}

// The online softmax's new running maxima of a strip of ROWS rows, from their scores' vector
// maxima mx: m = max(m, mx); corr[r] = 2^(m_old - m_new) rescales what row r summed before
// (exactly 1 where m did not grow, 0 where it was -inf); shift[r] = -m_new (0 for a row that
// has seen nothing, so its -inf scores give p = 0). Branch-free: whether a row's maximum grows
// is data, and a mispredicted branch here flushed the products in flight around it (5-7% of
// the forward tile over 4 key blocks on Zen 5). The exponentials of all rows take one vector
// call (a call to libm's exp2f spilled every vector register of the micro-kernels around it).
template <int ROWS>
inline void update_max(const V (&mx)[ROWS], float* m, float (&corr)[ROWS], float (&shift)[ROWS]) {
  constexpr int kLanes = (ROWS + W - 1) / W * W;
  alignas(64) float d[kLanes] = {};
  LCT_UNROLL for (int r = 0; r < ROWS; ++r) {
    const float x = Simd::reduce_max(mx[r]);
    const float m_new = m[r] < x ? x : m[r];
    d[r] = m_new == kNegInf ? 0.0f : m[r] - m_new;  // 0 where unchanged, -inf where m was -inf
    m[r] = m_new;
    shift[r] = m_new == kNegInf ? 0.0f : -m_new;
  }
  LCT_UNROLL for (int i = 0; i < kLanes; i += W) Simd::store(d + i, Simd::exp2_softmax(Simd::load(d + i)));
  LCT_UNROLL for (int r = 0; r < ROWS; ++r) corr[r] = d[r];
}

// A strip's p = exp2(s, shift[r]) (softmax_known's) over its scores in L1 (ROWS x cols, row
// stride np), the rows together so that no row waits on another's reductions: columns
// c..c+2W go to store(r, c, p0, p1) (two vectors: bf16 stores convert both at once); l[r] =
// l[r] * corr[r] + the row's sum of the fp32 p.
template <int ROWS, class Store, class Exp2>
inline void exp_strip(const float* s, int64_t np, int64_t cols, const float (&shift)[ROWS],
                      const float (&corr)[ROWS], float* l, Store&& store, Exp2&& exp2) {
  V sh[ROWS], sum[ROWS];
  LCT_UNROLL for (int r = 0; r < ROWS; ++r) {
    sh[r] = Simd::set1(shift[r]);
    sum[r] = Simd::zero();
  }
  for (int64_t c = 0; c < cols; c += 2 * W)  // cols: whole chunks, an even number of vectors
    LCT_UNROLL for (int r = 0; r < ROWS; ++r) {
      const V p0 = exp2(Simd::load(s + r * np + c), sh[r]);
      const V p1 = exp2(Simd::load(s + r * np + c + W), sh[r]);
      store(r, c, p0, p1);
      sum[r] = Simd::add(Simd::add(sum[r], p0), p1);
    }
  LCT_UNROLL for (int r = 0; r < ROWS; ++r) l[r] = l[r] * corr[r] + Simd::reduce_add(sum[r]);
}

// One strip of N rows of the forward tile: scores, online softmax, p . v.
template <int N>
inline void fwd_strip(const FlashFwdTile& t, int64_t r0) {
  const int64_t D = t.D, np = t.np;
  float* s = t.scratch;  // [N][np]: the strip's scores, then its p
  const int64_t cols = visible_end<N>(t, r0);
  if (cols == 0) return;  // nothing visible: m, l and acc stay as they are
  V mx[N];
  strip_scores(t, r0, cols, s, mx, [&](int64_t c0, auto& sc) {
    mk_abt(t.q + r0 * t.ldq, t.ldq, t.kt + chunk_offset(D, c0), NC, D, sc);
  });
  float corr[N], shift[N];
  update_max(mx, t.m + r0, corr, shift);
  exp_strip(s, np, cols, shift, corr, t.l + r0,
            [&](int r, int64_t c, V p0, V p1) {
              Simd::store(s + r * np + c, p0);
              Simd::store(s + r * np + c + W, p1);
            },
            exp2_shifted);
  over_d<Shape::DC>(D, [&](int64_t d0, auto dc) {
    mk_ab<N, decltype(dc)::value>(s, np, t.v + panel_offset(D, np, d0), panel_stride(D, d0), cols,
                                  t.acc + r0 * D + d0, D, corr, false);
  });
}

void flash_fwd_tile(const FlashFwdTile& t) {
  // The next tile's kt and v into L2, a slice before each strip: they come from L3 otherwise
  // (each is [D][np] floats, 32 KiB at D = 64), and the first strip of every tile waits.
  const int64_t bytes = t.next_kt ? t.np * t.D * int64_t(sizeof(float)) : 0, strips = (t.rows + R - 1) / R;
  int64_t sent = 0, strip_no = 0;
  auto prefetch_upto = [&](int64_t upto) {
    for (; sent < upto; sent += 64) {
      Simd::prefetch_l2(reinterpret_cast<const char*>(t.next_kt) + sent);
      Simd::prefetch_l2(reinterpret_cast<const char*>(t.next_v) + sent);
    }
  };
  over_strips(t.rows, [&](int64_t r0, auto strip) {
    prefetch_upto(std::min(bytes, bytes * ++strip_no / strips));
    fwd_strip<decltype(strip)::value>(t, r0);
  });
  prefetch_upto(bytes);
}

// The row stride of the backward tile's p and ds (shape.hpp's PPAD: why it may exceed np).
inline int64_t p_stride(const FlashBwdTile& t) { return t.ldp ? t.ldp : t.np; }

// Phase A of the backward tile for one chunk of NN vectors of keys from c0 and a strip of N
// rows: P = 2^(s - lse2) and dS = P * (dP - delta) into the tile's p and ds.
template <int N, int NN>
inline void bwd_chunk(const FlashBwdTile& t, int64_t r0, int64_t c0) {
  const int64_t D = t.D, ldp = p_stride(t);
  V s[N][NN];
  mk_abt(t.q + r0 * t.ldq, t.ldq, t.kt + chunk_offset(D, c0), NC, D, s);
  if (t.masked) mask_scores(s, t.kidx + c0, t.kdoc + c0, t.qidx + r0, t.qlo + r0, t.qdoc + r0);
  softmax_known(s, t.lse2 + r0, exp2_shifted);
  LCT_UNROLL for (int r = 0; r < N; ++r)
    LCT_UNROLL for (int v = 0; v < NN; ++v) Simd::store(t.p + (r0 + r) * ldp + c0 + v * W, s[r][v]);
  mk_abt(t.dout + r0 * t.ldq, t.ldq, t.vt + chunk_offset(D, c0), NC, D, s);  // s now holds dP
  LCT_UNROLL for (int r = 0; r < N; ++r) {
    const V dl = Simd::set1(t.delta[r0 + r]);
    const float* pr = t.p + (r0 + r) * ldp + c0;
    float* dsr = t.ds + (r0 + r) * ldp + c0;
    LCT_UNROLL for (int v = 0; v < NN; ++v)
      Simd::store(dsr + v * W, Simd::mul(Simd::load(pr + v * W), Simd::sub(s[r][v], dl)));
  }
}

// Phase A of the backward tile for one strip of N rows: P and dS chunk by chunk, dq = dS k.
template <int N>
inline void bwd_strip(const FlashBwdTile& t, int64_t r0) {
  const int64_t D = t.D, np = t.np, ldp = p_stride(t), cols = visible_end<N>(t, r0);
  if (cols < np)
    for (int r = 0; r < N; ++r) {  // P and dS of the keys no row sees: 0
      std::fill(t.p + (r0 + r) * ldp + cols, t.p + (r0 + r) * ldp + np, 0.0f);
      std::fill(t.ds + (r0 + r) * ldp + cols, t.ds + (r0 + r) * ldp + np, 0.0f);
    }
  int64_t c0 = 0;  // over_chunks written out: through its lambda the tile ran 0.5-1% slower
  for (; c0 + NC <= cols; c0 += NC) bwd_chunk<N, NV>(t, r0, c0);
  if constexpr (NH != NV)
    if (c0 < cols) bwd_chunk<N, NH>(t, r0, c0);
  over_d<Shape::DC>(D, [&](int64_t d0, auto dc) {
    const int64_t lddq = t.lddq ? t.lddq : D;
    mk_ab<N, decltype(dc)::value>(t.ds + r0 * ldp, ldp, t.k + panel_offset(D, np, d0), panel_stride(D, d0),
                                  cols, t.dq + r0 * lddq + d0, lddq, nullptr, true, t.dq_add);
  });
}

void flash_bwd_tile(const FlashBwdTile& t) {
  const int64_t D = t.D, np = t.np, ldp = p_stride(t);
  over_strips(t.rows, [&](int64_t r0, auto strip) { bwd_strip<decltype(strip)::value>(t, r0); });
  // Phase B, per group of KC keys, in passes of Shape::PB rows, so that a pass's P, dS, dout
  // and q rows stay close across the key groups (24 rows: 36 KiB at np = 128, D = 64, within
  // Zen 5's 48 KiB L1) while dK and dV ([np, D] each) are loaded and stored once a pass:
  // dv += P^T dout, dk += dS^T q. Each sum adds its rows in order, whatever the pass (a
  // pass's end stores the fp32 sums and the next loads them). A masked tile's groups whose
  // keys all come after the pass's rows add only zeros and are left out (on the causal
  // diagonal, nearly half of the tile's phase B).
  for (int64_t rb = 0; rb < t.rows; rb += Shape::PB) {
    const int64_t rc = std::min<int64_t>(Shape::PB, t.rows - rb);
    const int32_t qmax = t.masked ? *std::max_element(t.qidx + rb, t.qidx + rb + rc) : INT32_MAX;
    for (int64_t k0 = 0; k0 < np; k0 += KC) {
      if (t.masked && least_key_idx(t.kidx, k0, KC) > qmax) continue;
      over_d<Shape::DB>(D, [&](int64_t d0, auto dc) {
        mk_atb<decltype(dc)::value>(t.p + rb * ldp + k0, ldp, t.dout + rb * t.ldq + d0, t.ldq, rc,
                                    t.dv + k0 * D + d0, D);
        mk_atb<decltype(dc)::value>(t.ds + rb * ldp + k0, ldp, t.q + rb * t.ldq + d0, t.ldq, rc,
                                    t.dk + k0 * D + d0, D);
      });
    }
  }
}

}  // namespace lct::LCT_ISA_NS
