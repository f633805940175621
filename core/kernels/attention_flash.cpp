// The flash-attention driver: which tiles exist (masks), in what order they run, how keys
// are packed for the micro-kernels, and how backward's dQ is summed in a fixed order. The
// arithmetic of a tile is the ISA's (kernels/isa/flash_tiles.hpp).
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <tuple>
#include <type_traits>
#include <utility>

#include "common/error.hpp"
#include "kernels/attention.hpp"
#include "kernels/dq_order.hpp"
#include "kernels/isa/kernels.hpp"

namespace lct {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
// Tags of packed tokens: a query of no document and a padding key never match anything.
constexpr int32_t kQueryNoDoc = INT32_MIN + 1, kKeyPadDoc = INT32_MIN;
// The most units (head, query block) a forward task walks together, and how many it is given
// where the tasks allow (see forward()); the most query blocks of a task follow.
constexpr int64_t kMaxUnits = 16, kUnitsWanted = 4, kMaxTaskBlocks = kUnitsWanted;
constexpr int64_t kMaxKeyRun = KeyRuns::kMaxKeyRun, kPendingDq = DqQueue::kSlots;

// A forward task's most units: all G heads of a KV head, or kUnitsWanted query blocks of fewer.
int64_t forward_units(const AttnLimits& lim) {
  const int64_t G = lim.heads / lim.kv_heads;
  return G <= kMaxUnits ? std::max(G, kUnitsWanted) : kUnitsWanted;
}

std::vector<TagSpan> spans(TokenTags t, int64_t n, int64_t block) {
  std::vector<TagSpan> out;
  for (int64_t b = 0; b < n; b += block) out.push_back(tag_span(t, b, std::min(n, b + block)));
  return out;
}

}  // namespace

TileGrid::TileGrid(const AttnDims& d, TokenTags qt, TokenTags kt, AttnBlocks b)
    : qs(spans(qt, d.Tq, b.q)), ks(spans(kt, d.Tk, b.k)), nq(int64_t(qs.size())), nk(int64_t(ks.size())),
      BQ(b.q), BK(b.k), window(d.window) {}

Tile TileGrid::tile(int64_t ib, int64_t jb) const {
  const TagSpan &q = qs[size_t(ib)], &k = ks[size_t(jb)];
  if (!may_see(q, k, window)) return Tile::Skip;
  return sees_all(q, k, window) ? Tile::Full : Tile::Masked;
}

int64_t TileGrid::next_visible(int64_t ib, int64_t from) const {
  while (from < nk && tile(ib, from) == Tile::Skip) ++from;
  return from;
}

TagSpan tag_span(TokenTags t, int64_t begin, int64_t end) {
  TagSpan s;
  for (int64_t i = begin; i < end; ++i) {
    if (t.doc[i] < 0) {
      s.any_pad = true;
      continue;
    }
    s.idx_min = std::min(s.idx_min, t.idx[i]);
    s.idx_max = std::max(s.idx_max, t.idx[i]);
    s.doc_min = std::min(s.doc_min, t.doc[i]);
    s.doc_max = std::max(s.doc_max, t.doc[i]);
  }
  return s;
}

bool may_see(const TagSpan& q, const TagSpan& k, int64_t window) {
  if (q.empty() || k.empty() || k.idx_min > q.idx_max || k.doc_min > q.doc_max || q.doc_min > k.doc_max)
    return false;
  // Every key at least W before every query: outside every query's window.
  return window <= 0 || int64_t(k.idx_max) > int64_t(q.idx_min) - window;
}

bool sees_all(const TagSpan& q, const TagSpan& k, int64_t window) {
  const bool one_doc = q.doc_min == q.doc_max && k.doc_min == k.doc_max && q.doc_min == k.doc_min;
  return one_doc && !q.any_pad && !k.any_pad && k.idx_max <= q.idx_min &&
         (window <= 0 || int64_t(k.idx_min) > int64_t(q.idx_max) - window);
}

std::vector<TagSpan> tag_runs(TokenTags t, int64_t n) {
  std::vector<TagSpan> out;
  for (int64_t b = 0; b < n;) {
    int64_t e = b + 1;
    while (e < n && int64_t(t.idx[e]) == int64_t(t.idx[e - 1]) + 1) ++e;
    out.push_back(tag_span(t, b, e));
    b = e;
  }
  return out;
}

// Per-thread scratch. The forward's query blocks are copied here dense and zero-padded unless
// already dense, whole and of the products' type (block_rows).
struct FlashAttention::Scratch {
  Buffer<float> q;                     // [U, bqp, D] fp32 products
  Buffer<bf16> q16;                    // likewise, bf16 products
  Buffer<float> lse2, delta;           // [bqp]
  Buffer<float> dq;                    // forward's acc [U, bqp, D]; backward's dQ [kPendingDq, bqp, D]
  Buffer<float> m, l;                  // [U, bqp]: U = forward_units, a forward task's most
  Buffer<int32_t> qidx, qlo, qdoc;     // [kMaxTaskBlocks, bqp]
  Buffer<float> p, ds;                 // [bqp, np] (bf16 products: p is the [R, np] scratch)
  Buffer<bf16> p16, ds16, pi, dsi;     // [bqp, np] bf16 products
  Buffer<float> dk, dv;                // [run, np, D]: the backward task's key blocks
  Buffer<bf16> keys16;                 // [2, np, D] bf16 products: a key block's rows while packed
};

// Per call: keys and values of every (KV head, key block) packed for the micro-kernels; the
// rows' lse in log2 units; the backward's queries and output gradients, dense (and for bf16
// products by pairs of rows too); and the per-(head, query block) turn of backward's dQ sum.
struct FlashAttention::Packed {
  Buffer<float> kt, vt;   // [KV, nk, np/chunk, D, chunk]   fp32 products (kt pre-scaled)
  Buffer<float> k, v;     // [KV, nk, D/panel, np, panel]   (KeyBlockLayout)
  Buffer<bf16> kt2, vt2;  // [KV, nk, D/2, np, 2]   bf16 products
  Buffer<bf16> k2, v2;    // [KV, nk, np/2, D, 2]
  Buffer<int32_t> kidx, kdoc;  // [nk, np]
  Buffer<float> lse2;     // [H, Tq]
  Buffer<float> qd, doutd;  // [H, nq, bqp, D]        fp32 products, zero beyond the block
  Buffer<bf16> q16, dout16; // [H, nq, bqp, D]        bf16 products
  Buffer<bf16> q2, dout2;   // [H, nq, bqp/2, D, 2]   bf16 products
  std::unique_ptr<DqTurns> turns;  // [H, nq]: key block whose dQ goes next
};

FlashAttention::FlashAttention(const AttnLimits& lim, AttnBlocks blocks, Isa isa, Precision products)
    : lim_(lim), packed_(std::make_unique<Packed>()) {
  if (blocks.q < 1 || blocks.k < 1) fail("attention blocks must be at least 1 (got ", blocks.q, " x ", blocks.k, ")");
  if (lim.heads % lim.kv_heads != 0) fail("attention: ", lim.heads, " heads are not a multiple of ", lim.kv_heads, " KV heads");
  kern_ = isa_kernels(isa);
  if (!kern_) fail("this build of lctrain has no '", int(isa), "' kernels");
  if (lim.head_dim % kern_->width != 0) kern_ = isa_kernels(Isa::Generic);
  bf16_tiles_ = products == Precision::Bf16 && kern_->flash_fwd_tile_bf16;
  // The vector paths' multiply-add is one fused operation, the rounding of DqQueue's add, so
  // a tile may add its dQ in place with the same bits; the portable path's may not be fused.
  dq_in_place_ = kern_->isa != Isa::Generic;
  // Blocks are whole strips and chunks of the micro-kernels: only a sequence's last block
  // is ever partial. Query blocks round down, so that under the causal mask no query block
  // reaches past the key block of its own rows (rounded up, every one needs one more key
  // block, mostly masked).
  const int64_t R = kern_->strip_rows, NC = kern_->key_chunk, D = lim.head_dim;
  blocks_ = {std::max(R, blocks.q / R * R), (blocks.k + NC - 1) / NC * NC};
  np_ = blocks_.k;
  ldp_ = np_ + kern_->p_pad;
  bqp_ = blocks_.q;
  const int64_t nk = (lim.max_tk + np_ - 1) / np_, nq = (lim.max_tq + bqp_ - 1) / bqp_;
  const size_t kv = size_t(lim.kv_heads * nk * np_ * D), f32 = bf16_tiles_ ? 0 : 1, b16 = 1 - f32;
  Packed& pk = *packed_;
  for (Buffer<float>* b : {&pk.kt, &pk.vt, &pk.k, &pk.v}) *b = Buffer<float>(f32 * kv);
  for (Buffer<bf16>* b : {&pk.kt2, &pk.vt2, &pk.k2, &pk.v2}) *b = Buffer<bf16>(b16 * kv);
  pk.kidx = Buffer<int32_t>(size_t(nk * np_));
  pk.kdoc = Buffer<int32_t>(size_t(nk * np_));
  pk.lse2 = Buffer<float>(size_t(lim.heads * lim.max_tq));
  const size_t rows = size_t(lim.heads * nq * bqp_ * D);
  for (Buffer<float>* b : {&pk.qd, &pk.doutd}) *b = Buffer<float>(f32 * rows);
  for (Buffer<bf16>* b : {&pk.q16, &pk.dout16, &pk.q2, &pk.dout2}) *b = Buffer<bf16>(b16 * rows);
  pk.turns = std::make_unique<DqTurns>(lim.heads, nq);

  const int threads = omp_get_max_threads();
  const size_t U = size_t(forward_units(lim)), bq = size_t(bqp_), d = size_t(D), np = size_t(np_);
  const size_t ldp = size_t(ldp_);
  scratch_.resize(size_t(threads));
#pragma omp parallel num_threads(threads)
  {
    // Allocated (and so first touched) by the thread that uses it.
    Scratch& s = scratch_[size_t(omp_get_thread_num())];
    s.q = Buffer<float>(f32 * U * bq * d);
    s.q16 = Buffer<bf16>(b16 * U * bq * d);
    s.lse2 = Buffer<float>(bq);
    s.delta = Buffer<float>(bq);
    s.dq = Buffer<float>(std::max<size_t>(U, kPendingDq) * bq * d);
    s.m = Buffer<float>(U * bq);
    s.l = Buffer<float>(U * bq);
    for (Buffer<int32_t>* b : {&s.qidx, &s.qlo, &s.qdoc}) *b = Buffer<int32_t>(kMaxTaskBlocks * bq);
    s.p = Buffer<float>(bf16_tiles_ ? size_t(R) * np : bq * ldp);
    s.ds = Buffer<float>(f32 * bq * ldp);
    for (Buffer<bf16>* b : {&s.p16, &s.ds16, &s.pi, &s.dsi}) *b = Buffer<bf16>(b16 * bq * np);
    s.dk = Buffer<float>(size_t(kMaxKeyRun) * np * d);
    s.dv = Buffer<float>(size_t(kMaxKeyRun) * np * d);
    s.keys16 = Buffer<bf16>(b16 * 2 * np * d);
  }
}

FlashAttention::~FlashAttention() = default;

Isa FlashAttention::isa() const { return kern_->isa; }
Precision FlashAttention::products() const { return bf16_tiles_ ? Precision::Bf16 : Precision::Fp32; }

size_t FlashAttention::workspace_bytes_for(const AttnLimits& lim, AttnBlocks b, int threads) {
  // Upper bound over the ISAs and precisions: the widest chunk (64 keys) pads the most,
  // query blocks are whole strips of 4; fp32 products need the most, bf16 ones add the row
  // pairs and a strip's fp32 scores.
  const int64_t np = (b.k + 63) / 64 * 64, bqp = std::max<int64_t>(4, b.q / 4 * 4), D = lim.head_dim;
  const int64_t nk = (lim.max_tk + np - 1) / np, nq = (lim.max_tq + bqp - 1) / bqp, U = forward_units(lim);
  const int64_t per_thread = bqp * D * (2 * U + kPendingDq) + (2 + 3 * kMaxTaskBlocks + 2 * U) * bqp +
                             (2 * bqp + 6) * np + 2 * bqp * kMaxPPad + (2 * kMaxKeyRun + 1) * np * D;
  const int64_t shared = 4 * lim.kv_heads * nk * np * D + 2 * nk * np + lim.heads * lim.max_tq +
                         2 * lim.heads * nq * bqp * D;
  return size_t(per_thread * threads + shared) * sizeof(float);
}

size_t FlashAttention::workspace_bytes() const {
  const Packed& pk = *packed_;
  size_t n = (pk.kt.size() + pk.vt.size() + pk.k.size() + pk.v.size() + pk.kidx.size() +
              pk.kdoc.size() + pk.lse2.size() + pk.qd.size() + pk.doutd.size()) * 4 +
             (pk.kt2.size() + pk.vt2.size() + pk.k2.size() + pk.v2.size() + pk.q16.size() + pk.dout16.size() +
              pk.q2.size() + pk.dout2.size()) * 2;
  for (const Scratch& s : scratch_) {
    for (const Buffer<float>* b : {&s.q, &s.lse2, &s.delta, &s.dq, &s.m, &s.l, &s.p, &s.ds, &s.dk, &s.dv})
      n += b->size() * 4;
    for (const Buffer<bf16>* b : {&s.q16, &s.p16, &s.ds16, &s.pi, &s.dsi, &s.keys16}) n += b->size() * 2;
    n += (s.qidx.size() + s.qlo.size() + s.qdoc.size()) * 4;
  }
  return n;
}

int64_t FlashAttention::whole_strips(int64_t rows) const {
  const int64_t R = kern_->strip_rows;
  return (rows + R - 1) / R * R;
}

void FlashAttention::check(const AttnDims& d) const {
  if (d.Tq > lim_.max_tq || d.Tk > lim_.max_tk || d.H != lim_.heads || d.KV != lim_.kv_heads ||
      d.D != lim_.head_dim)
    fail("attention call [Tq ", d.Tq, ", Tk ", d.Tk, ", H ", d.H, ", KV ", d.KV, ", D ", d.D,
         "] exceeds the kernel's limits [", lim_.max_tq, ", ", lim_.max_tk, ", ", lim_.heads, ", ",
         lim_.kv_heads, ", ", lim_.head_dim, "]");
}

namespace {

// The layouts of a key block (n rows of D, row stride ld, zero for rows n..np), for products
// with the reduction over D (transposed) or over the keys:
//   fp32  transposed in chunks of keys (times mult), rows in panels of D (kernels.hpp's
//         KeyBlockLayout)
//   bf16  pairs of dimensions [D/2][np][2], pairs of rows [np/2][D][2] (pair_products.hpp's
//         transpose_pairs and interleave_rows, through the ISA's registers; also a query
//         block's q and dout rows)
// The fp32 transposes are the ISA's (IsaKernels::transpose_keys: a block of registers at a
// time); the other loops are plain copies (one conversion each at most) that the compiler
// vectorises.
template <class T>
void copy_rows(const T* x, int64_t ld, int64_t n, const KeyBlockLayout& to, float* out) {
  for (int64_t d0 = 0; d0 < to.D; d0 += to.panel) {
    const int64_t width = to.panel_width(d0);
    float* o = out + to.in_panels(0, d0);
    for (int64_t c = 0; c < n; ++c)
      for (int64_t i = 0; i < width; ++i) o[c * width + i] = load_f32(x[c * ld + d0 + i]);
    std::fill(o + n * width, o + to.np * width, 0.0f);
  }
}
// The scores' factor softmax_scale * log2(e), for bf16 keys: all of it multiplies each score
// in fp32 (FlashFwdTileBf16::kscale) and the keys go unscaled, read in place. Keys scaled by
// the whole factor were rounded to bf16 again (2^-9 of every score, a few percent of p where
// scores reach tens); scaled by its nearest power of two they gave the same scores, bit for
// bit, for a copy of every key block.
float bf16_key_scale(int64_t D) { return kLog2e / std::sqrt(float(D)); }

// A key block's rows in bf16: in place when they are bf16 already, else converted into
// `copy` [n][D]. Sets the rows' stride.
template <class T>
const bf16* rows_bf16(const T* x, int64_t ld, int64_t n, int64_t D, bf16* copy, int64_t* stride) {
  if constexpr (std::is_same_v<T, bf16>) {
    *stride = ld;
    return x;
  }
  for (int64_t c = 0; c < n; ++c)
    for (int64_t i = 0; i < D; ++i) copy[c * D + i] = to_bf16(load_f32(x[c * ld + i]));
  *stride = D;
  return copy;
}

}  // namespace

// Per (KV head, key block), in the products' layouts (above), keys for the scores
// pre-scaled by softmax_scale * log2(e) (fp32; bf16 keys are not, bf16_key_scale); and key
// tags [np] with padding that matches no query. The backward reads no v in key-row layout
// (p v is the forward's).
template <class T>
void FlashAttention::pack_keys(const AttnDims& d, const T* k, const T* v, TokenTags kt, bool backward) {
  const int64_t D = d.D, ldk = d.KV * D, np = np_;
  const int64_t nk = (d.Tk + np - 1) / np;
  const float mult = kLog2e / std::sqrt(float(D));
  Packed& pk = *packed_;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < d.KV * nk; ++task) {
    const int64_t g = task / nk, jb = task % nk, j0 = jb * np, n = std::min(np, d.Tk - j0);
    const size_t off = size_t(task * np * D);
    const T* kb = k + j0 * ldk + g * D;
    const T* vb = v + j0 * ldk + g * D;
    if (bf16_tiles_) {
      bf16* copy = scratch_[size_t(omp_get_thread_num())].keys16.data();
      int64_t ldv, ldk2;
      const bf16* vrows = rows_bf16(vb, ldk, n, D, copy, &ldv);
      const bf16* krows = rows_bf16(kb, ldk, n, D, copy + np * D, &ldk2);
      if (backward) {
        kern_->transpose_pairs_bf16(vrows, ldv, n, np, D, pk.vt2.data() + off);
        kern_->interleave_rows_bf16(krows, ldk2, n, np, D, pk.k2.data() + off);
      } else {
        kern_->interleave_rows_bf16(vrows, ldv, n, np, D, pk.v2.data() + off);
      }
      kern_->transpose_pairs_bf16(krows, ldk2, n, np, D, pk.kt2.data() + off);
    } else {
      const KeyBlockLayout to{D, np, kern_->key_chunk, kern_->key_panel};
      auto transpose = [&](const T* x, float m, float* out) {
        if constexpr (std::is_same_v<T, float>) kern_->transpose_keys(x, ldk, n, D, np, m, out);
        else kern_->transpose_keys_bf16(x, ldk, n, D, np, m, out);
      };
      transpose(kb, mult, pk.kt.data() + off);
      if (backward) {
        transpose(vb, 1.0f, pk.vt.data() + off);
        copy_rows(kb, ldk, n, to, pk.k.data() + off);
      } else {
        copy_rows(vb, ldk, n, to, pk.v.data() + off);
      }
    }
    if (g == 0)
      for (int64_t c = 0; c < np; ++c) {
        pk.kidx[size_t(jb * np + c)] = c < n ? kt.idx[j0 + c] : INT32_MAX;
        pk.kdoc[size_t(jb * np + c)] = c < n ? kt.doc[j0 + c] : kKeyPadDoc;
      }
  }
}

namespace {

// A query block's rows (q or dout of one head, row stride ld) copied (converted) into `copy`
// [bqp][D], zero beyond the block. Rows of one head are H * D floats apart in q and dout: at
// 2 KiB (8 heads of 64) a block's rows fall into a few L1 sets and evict each other in the
// backward's dK/dV pass, so the copy, about 1% of a tile's work, is worth more than it costs.
template <class P, class T>
void dense_rows(const T* x, int64_t ld, int64_t rows, int64_t bqp, int64_t D, P* copy) {
  for (int64_t r = 0; r < rows; ++r) {
    if constexpr (std::is_same_v<P, T>) std::copy(x + r * ld, x + r * ld + D, copy + r * D);
    else
      for (int64_t c = 0; c < D; ++c) store_as(copy + r * D + c, load_f32(x[r * ld + c]));
  }
  std::fill(copy + rows * D, copy + bqp * D, P{});
}
// The rows as a tile reads them: in place when the block is whole, dense (ld == D) and
// already of the products' type; else dense_rows into `copy`. Returns the rows and sets
// their stride.
template <class P, class T>
const P* block_rows(const T* x, int64_t ld, int64_t rows, int64_t bqp, int64_t D, P* copy, int64_t* stride) {
  if constexpr (std::is_same_v<P, T>) {
    if (rows == bqp && ld == D) {
      *stride = ld;
      return x;
    }
  }
  dense_rows(x, ld, rows, bqp, D, copy);
  *stride = D;
  return copy;
}

// Per-row values of a query block (lse2, delta), in place or padded with `pad` in `copy`.
const float* block_values(const float* x, int64_t rows, int64_t bqp, float pad, float* copy) {
  if (rows == bqp) return x;
  for (int64_t r = 0; r < bqp; ++r) copy[r] = r < rows ? x[r] : pad;
  return copy;
}

// The tags of one query block: "no document" for padding rows and rows beyond the block;
// qlo, the lowest key idx a row's window reaches (INT32_MIN without a window).
struct QueryTags {
  int32_t *idx, *lo, *doc;
};
void pack_query_tags(TokenTags qt, int64_t i0, int64_t rows, int64_t bqp, int64_t window, QueryTags out) {
  for (int64_t r = 0; r < bqp; ++r) {
    out.idx[r] = r < rows ? qt.idx[i0 + r] : 0;
    out.lo[r] = window_low(out.idx[r], window);
    out.doc[r] = r < rows && qt.doc[i0 + r] >= 0 ? qt.doc[i0 + r] : kQueryNoDoc;
  }
}

// Fields every tile of a call shares, for either product type: sizes and where the query
// block's tags are.
template <class A, class B>
void share_tile_fields(A& a, B& b, int64_t D, int64_t np, QueryTags tags) {
  b.kscale = bf16_key_scale(D);
  a.D = b.D = D;
  a.np = b.np = np;
  a.qidx = b.qidx = tags.idx;
  a.qlo = b.qlo = tags.lo;
  a.qdoc = b.qdoc = tags.doc;
}

// Output rows of one query block of one head: o = acc / l, lse = m + log2(l) in natural
// units; rows that saw no key get o = 0, lse = -inf.
void normalise_rows(const float* acc, const float* m, const float* l, int64_t rows, int64_t D,
                    int64_t ldo, float* o, float* lse) {
  for (int64_t r = 0; r < rows; ++r) {
    float* orow = o + r * ldo;
    if (l[r] == 0.0f) {
      std::fill(orow, orow + D, 0.0f);
      lse[r] = kNegInf;
      continue;
    }
    const float inv = 1.0f / l[r];
    for (int64_t x = 0; x < D; ++x) orow[x] = acc[r * D + x] * inv;
    lse[r] = (m[r] + std::log2(l[r])) * kLn2;
  }
}

}  // namespace

// A forward task: query blocks [ib0, ib1) for heads [h0, h0 + HG) of KV head g. Its units,
// (head, query block) pairs, read the same packed key blocks, which then come from L2 for all
// but the first unit on each instead of from L3 for every one.
struct FlashAttention::FwdTask {
  int64_t g, h0, HG, ib0, ib1;
};

template <class T>
void FlashAttention::forward(const AttnDims& d, const T* q, const T* k, const T* v, TokenTags qt,
                             TokenTags kt, float* o, float* lse) {
  check(d);
  const int64_t G = d.H / d.KV, tasks_wanted = 8 * int64_t(omp_get_max_threads());
  const TileGrid grid(d, qt, kt, blocks_);
  pack_keys(d, k, v, kt, false);
  // All G heads of a KV head when that still leaves 8 tasks a thread to balance, else one;
  // then adjacent query blocks, up to kUnitsWanted units a task, while that leaves 8 a thread
  // (with one KV head per query head, 4 query blocks a task ran the forward 8% faster than
  // one on Zen 5 at 4,096 tokens: the key blocks' reuse that grouped heads get).
  const int64_t HG = G <= kMaxUnits && grid.nq * d.KV >= tasks_wanted ? G : 1;
  int64_t QB = 1;
  while (2 * QB * HG <= kUnitsWanted && (grid.nq + 2 * QB - 1) / (2 * QB) * (d.H / HG) >= tasks_wanted) QB *= 2;
  const int64_t groups = d.H / HG, nqb = (grid.nq + QB - 1) / QB;

  // Groups of query blocks costliest first (most visible tiles), each for every head group.
  std::vector<int64_t> cost(static_cast<size_t>(nqb), 0), order(static_cast<size_t>(nqb));
  for (int64_t ib = 0; ib < grid.nq; ++ib)
    for (int64_t jb = 0; jb < grid.nk; ++jb) cost[size_t(ib / QB)] += grid.tile(ib, jb) != Tile::Skip;
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return cost[size_t(a)] > cost[size_t(b)]; });

#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < groups * nqb; ++task) {
    const int64_t b = order[size_t(task / groups)], h0 = task % groups * HG;
    forward_task(d, grid, q, qt, {h0 / G, h0, HG, b * QB, std::min(grid.nq, (b + 1) * QB)}, o, lse,
                 omp_get_thread_num());
  }
}

// A forward task's tiles and its units' queries. Per query block qb of the task: its tags
// [bqp]. Per unit u = qb * HG + hh: its query rows in the products' type, acc [bqp, D] (in
// dq's room), m and l [bqp].
struct FlashAttention::FwdTiles {
  FlashFwdTile t;
  FlashFwdTileBf16 t16;
  const float* q32[kMaxUnits];
  const bf16* q16[kMaxUnits];
  Scratch& sc;
  int64_t bqp;
  QueryTags tags(int64_t qb) const {
    return {sc.qidx.data() + qb * bqp, sc.qlo.data() + qb * bqp, sc.qdoc.data() + qb * bqp};
  }
};

template <class T>
void FlashAttention::forward_task(const AttnDims& d, const TileGrid& grid, const T* q, TokenTags qt,
                                  const FwdTask& w, float* o, float* lse, int thread) {
  const int64_t D = d.D, ldq = d.H * D, bqp = bqp_;
  FwdTiles f{{}, {}, {}, {}, scratch_[size_t(thread)], bqp};
  fwd_queries(d, grid, q, qt, w, f);
  // The last of the task's query blocks that sees key block jb (-1: none does).
  auto last_seeing = [&](int64_t jb) {
    int64_t last = -1;
    for (int64_t ib = w.ib0; ib < w.ib1; ++ib)
      if (grid.tile(ib, jb) != Tile::Skip) last = ib;
    return last;
  };
  // The first key block from `from` that any of the task's query blocks sees (nk: none).
  auto next_seen = [&](int64_t from) {
    while (from < grid.nk && last_seeing(from) < 0) ++from;
    return from;
  };
  for (int64_t jb = next_seen(0), jn; jb < grid.nk; jb = jn) {  // over the seen key blocks only
    jn = next_seen(jb + 1);
    fwd_key_block(d, grid, w, f, jb, last_seeing(jb), jn, thread);
  }
  for (int64_t ib = w.ib0; ib < w.ib1; ++ib)
    for (int64_t hh = 0, u = (ib - w.ib0) * w.HG; hh < w.HG; ++hh, ++u) {
      const int64_t i0 = ib * grid.BQ, h = w.h0 + hh;
      normalise_rows(f.sc.dq.data() + u * bqp * D, f.sc.m.data() + u * bqp, f.sc.l.data() + u * bqp,
                     grid.rows(ib, d.Tq), D, ldq, o + i0 * ldq + h * D, lse + h * d.Tq + i0);
    }
}

// A forward task's start: its units' m = -inf, l = 0 and acc = 0, its query blocks' tags and
// its units' query rows (dense and padded where the tiles need it) into f.
template <class T>
void FlashAttention::fwd_queries(const AttnDims& d, const TileGrid& grid, const T* q, TokenTags qt,
                                 const FwdTask& w, FwdTiles& f) const {
  const int64_t D = d.D, ldq = d.H * D, bqp = bqp_, HG = w.HG, units = (w.ib1 - w.ib0) * HG;
  Scratch& sc = f.sc;
  std::fill(sc.m.data(), sc.m.data() + units * bqp, kNegInf);
  std::fill(sc.l.data(), sc.l.data() + units * bqp, 0.0f);
  std::fill(sc.dq.data(), sc.dq.data() + units * bqp * D, 0.0f);
  share_tile_fields(f.t, f.t16, D, np_, f.tags(0));
  f.t.scratch = f.t16.scores = sc.p.data();
  f.t16.scratch = sc.p16.data();
  for (int64_t ib = w.ib0; ib < w.ib1; ++ib) {
    const int64_t qb = ib - w.ib0, i0 = ib * grid.BQ, rows = grid.rows(ib, d.Tq);
    pack_query_tags(qt, i0, rows, bqp, d.window, f.tags(qb));
    for (int64_t hh = 0, u = qb * HG; hh < HG; ++hh, ++u) {
      const T* qb_rows = q + i0 * ldq + (w.h0 + hh) * D;
      if (bf16_tiles_) f.q16[u] = block_rows(qb_rows, ldq, rows, bqp, D, sc.q16.data() + u * bqp * D, &f.t16.ldq);
      else f.q32[u] = block_rows(qb_rows, ldq, rows, bqp, D, sc.q.data() + u * bqp * D, &f.t.ldq);
    }
  }
}

// A forward task's tiles on key block jb: each of its units whose query block sees jb, up to
// query block `last`. The task's last tile on jb brings key block jn into L2 (none: jn = nk).
void FlashAttention::fwd_key_block(const AttnDims& d, const TileGrid& grid, const FwdTask& w, FwdTiles& f,
                                   int64_t jb, int64_t last, int64_t jn, int thread) const {
  const int64_t D = d.D, np = np_, bqp = bqp_, HG = w.HG;
  const Packed& pk = *packed_;
  FlashFwdTile& t = f.t;
  FlashFwdTileBf16& t16 = f.t16;
  const size_t off = size_t((w.g * grid.nk + jb) * np * D), next = size_t((w.g * grid.nk + jn) * np * D);
  t.kidx = t16.kidx = pk.kidx.data() + jb * np;
  t.kdoc = t16.kdoc = pk.kdoc.data() + jb * np;
  t.kt = pk.kt.data() + off;
  t.v = pk.v.data() + off;
  t16.kt2 = pk.kt2.data() + off;
  t16.v2 = pk.v2.data() + off;
  for (int64_t ib = w.ib0; ib <= last; ++ib) {
    const Tile kind = grid.tile(ib, jb);
    if (kind == Tile::Skip) continue;
    const int64_t qb = ib - w.ib0;
    const QueryTags qtags = f.tags(qb);
    t.qidx = t16.qidx = qtags.idx;
    t.qlo = t16.qlo = qtags.lo;
    t.qdoc = t16.qdoc = qtags.doc;
    t.rows = t16.rows = whole_strips(grid.rows(ib, d.Tq));  // a sequence's last block: no empty strips
    t.masked = t16.masked = kind == Tile::Masked || grid.cols(jb, d.Tk) < np;  // padding keys are masked
    for (int64_t hh = 0, u = qb * HG; hh < HG; ++hh, ++u) {
      if (thread == 0 && progress_) progress_();
      t.acc = t16.acc = f.sc.dq.data() + u * bqp * D;
      t.m = t16.m = f.sc.m.data() + u * bqp;
      t.l = t16.l = f.sc.l.data() + u * bqp;
      const bool prefetch = ib == last && hh + 1 == HG && jn < grid.nk;
      t.next_kt = prefetch ? pk.kt.data() + next : nullptr;
      t.next_v = prefetch ? pk.v.data() + next : nullptr;
      if (bf16_tiles_) {
        t16.q = f.q16[u];
        kern_->flash_fwd_tile_bf16(t16);
      } else {
        t.q = f.q32[u];
        kern_->flash_fwd_tile(t);
      }
    }
  }
}

// One backward call's operands and geometry, shared by its tasks.
struct FlashAttention::BwdCall {
  const AttnDims& d;
  const TileGrid& grid;
  const float* delta;
  TokenTags qt;
  float *dq, *dk, *dv;
};

template <class T>
void FlashAttention::backward(const AttnDims& d, const T* q, const T* k, const T* v,
                              const float* lse, const float* delta, const T* dout, TokenTags qt,
                              TokenTags kt, float* dq, float* dk, float* dv) {
  check(d);
  const TileGrid grid(d, qt, kt, blocks_);
  pack_keys(d, k, v, kt, true);
  Packed& pk = *packed_;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < d.H * d.Tq; ++i)
    pk.lse2[size_t(i)] = lse[i] == kNegInf ? std::numeric_limits<float>::infinity() : lse[i] * kLog2e;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < d.H * grid.nq; ++task) pack_query_block(d, grid, q, dout, task);
  pk.turns->start(grid, d.H);
  // A task is a run of consecutive key blocks of one KV head (dq_order.hpp): a query block's
  // tags, lse and delta are then set up once for the run's tiles instead of once a tile.
  // Neither the run nor the thread count changes the bits: dK and dV of a key block are
  // summed over the query blocks in order, dQ over the key blocks in order.
  const BwdCall c{d, grid, delta, qt, dq, dk, dv};
  KeyRuns(d.KV, grid.nk, omp_get_max_threads()).for_each([&](int64_t g, int64_t jb0, int64_t jb1) {
    backward_run(c, g, jb0, jb1, omp_get_thread_num());
  });
}

// Head h's q and dout rows of query block ib (task = h nq + ib), dense and zero-padded, once
// per call: a query block's tiles are split over up to nk / kMaxKeyRun tasks, which would
// each copy them (strided by H D) otherwise. bf16 products also take them by pairs of rows.
template <class T>
void FlashAttention::pack_query_block(const AttnDims& d, const TileGrid& grid, const T* q, const T* dout,
                                      int64_t task) {
  const int64_t h = task / grid.nq, ib = task % grid.nq, D = d.D, ldq = d.H * D;
  const int64_t rows = grid.rows(ib, d.Tq), bqp = bqp_;
  const size_t off = size_t(task * bqp * D), at = size_t(ib * grid.BQ * ldq + h * D);
  Packed& pk = *packed_;
  if (!bf16_tiles_) {
    dense_rows(q + at, ldq, rows, bqp, D, pk.qd.data() + off);
    dense_rows(dout + at, ldq, rows, bqp, D, pk.doutd.data() + off);
    return;
  }
  // The pairs come from the dense copy (already bf16, rounded as interleave_rows rounds):
  // the strided rows are read once.
  for (auto [x, dense, pairs] : {std::tuple{q + at, pk.q16.data(), pk.q2.data()},
                                 std::tuple{dout + at, pk.dout16.data(), pk.dout2.data()}}) {
    dense_rows(x, ldq, rows, bqp, D, dense + off);
    kern_->interleave_rows_bf16(dense + off, D, rows, bqp, D, pairs + off);
  }
}

// The backward tiles' fields that do not change within a task, for either product type.
struct FlashAttention::BwdTiles {
  FlashBwdTile t;
  FlashBwdTileBf16 t16;
};

void FlashAttention::backward_run(const BwdCall& c, int64_t g, int64_t jb0, int64_t jb1, int thread) {
  const AttnDims& d = c.d;
  const TileGrid& grid = c.grid;
  const int64_t D = d.D, G = d.H / d.KV, np = np_, bqp = bqp_;
  Scratch& sc = scratch_[size_t(thread)];
  const Packed& pk = *packed_;
  std::fill(sc.dk.data(), sc.dk.data() + (jb1 - jb0) * np * D, 0.0f);
  std::fill(sc.dv.data(), sc.dv.data() + (jb1 - jb0) * np * D, 0.0f);
  BwdTiles b = bwd_tiles(sc);
  const float dq_scale = 1.0f / std::sqrt(float(D));
  DqQueue queue({packed_->turns.get(), &grid, c.dq, d.H, D, dq_scale}, sc.dq.data(), bqp * D,
                thread == 0 ? &progress_ : nullptr);
  for (int64_t ib = 0; ib < grid.nq; ++ib) {
    if (grid.next_visible(ib, jb0) >= jb1) continue;
    const int64_t i0 = ib * grid.BQ, rows = grid.rows(ib, d.Tq);
    b.t.rows = b.t16.rows = whole_strips(rows);
    pack_query_tags(c.qt, i0, rows, bqp, d.window, {sc.qidx.data(), sc.qlo.data(), sc.qdoc.data()});
    for (int64_t h = g * G; h < (g + 1) * G; ++h) {
      bwd_queries(c, b, sc, h, ib);
      for (int64_t jb = jb0; jb < jb1; ++jb) {
        const Tile kind = grid.tile(ib, jb);
        if (kind == Tile::Skip) continue;
        if (thread == 0 && progress_) progress_();
        const size_t off = size_t((g * grid.nk + jb) * np * D), mine = size_t((jb - jb0) * np * D);
        // In place where it is this tile's turn and the block has no padding rows: the
        // kernel adds to dQ as it goes, instead of a slot written and read back.
        float* dq_rows = dq_in_place_ && b.t.rows == rows ? queue.in_place(h, ib, jb) : nullptr;
        b.t.masked = b.t16.masked = kind == Tile::Masked || grid.cols(jb, d.Tk) < np;
        b.t.kidx = b.t16.kidx = pk.kidx.data() + jb * np;
        b.t.kdoc = b.t16.kdoc = pk.kdoc.data() + jb * np;
        b.t.dk = b.t16.dk = sc.dk.data() + mine;
        b.t.dv = b.t16.dv = sc.dv.data() + mine;
        b.t.dq = b.t16.dq = dq_rows ? dq_rows : queue.slot();
        b.t.lddq = b.t16.lddq = dq_rows ? d.H * D : D;
        b.t.dq_add = b.t16.dq_add = dq_rows ? dq_scale : 0.0f;
        if (bf16_tiles_) {
          b.t16.kt2 = pk.kt2.data() + off, b.t16.vt2 = pk.vt2.data() + off, b.t16.k2 = pk.k2.data() + off;
          kern_->flash_bwd_tile_bf16(b.t16);
        } else {
          b.t.kt = pk.kt.data() + off, b.t.vt = pk.vt.data() + off, b.t.k = pk.k.data() + off;
          kern_->flash_bwd_tile(b.t);
        }
        if (dq_rows) queue.pass(h, ib, jb);
        else queue.push(h, ib, jb, rows);
      }
    }
  }
  queue.drain();
  add_key_grads(c, sc, g, jb0, jb1);
}

// Adds a task's dK (scaled) and dV of key blocks [jb0, jb1) of KV head g to the call's.
void FlashAttention::add_key_grads(const BwdCall& c, const Scratch& sc, int64_t g, int64_t jb0, int64_t jb1) const {
  const int64_t D = c.d.D, ldk = c.d.KV * D, np = np_;
  const float scale = 1.0f / std::sqrt(float(D));
  for (int64_t jb = jb0; jb < jb1; ++jb)
    for (int64_t col = 0, j0 = jb * c.grid.BK; col < c.grid.cols(jb, c.d.Tk); ++col) {
      float* dkr = c.dk + (j0 + col) * ldk + g * D;
      float* dvr = c.dv + (j0 + col) * ldk + g * D;
      const float* x = sc.dk.data() + ((jb - jb0) * np + col) * D;
      const float* y = sc.dv.data() + ((jb - jb0) * np + col) * D;
      for (int64_t e = 0; e < D; ++e) {
        dkr[e] += scale * x[e];
        dvr[e] += y[e];
      }
    }
}

FlashAttention::BwdTiles FlashAttention::bwd_tiles(Scratch& sc) const {
  BwdTiles b;
  FlashBwdTile& t = b.t;
  FlashBwdTileBf16& t16 = b.t16;
  share_tile_fields(t, t16, lim_.head_dim, np_, {sc.qidx.data(), sc.qlo.data(), sc.qdoc.data()});
  t.p = t16.p = sc.p.data();
  t.ds = sc.ds.data();
  t.ldp = ldp_;
  t16.ds = sc.ds16.data();
  t16.pi = sc.pi.data();
  t16.dsi = sc.dsi.data();
  return b;
}

// Head h's rows of query block ib for the run's tiles: q and dout (packed by the call), lse2
// and delta (padded).
void FlashAttention::bwd_queries(const BwdCall& c, BwdTiles& b, Scratch& sc, int64_t h, int64_t ib) const {
  const AttnDims& d = c.d;
  const int64_t D = d.D, bqp = bqp_, i0 = ib * c.grid.BQ, rows = c.grid.rows(ib, d.Tq);
  const size_t off = size_t((h * c.grid.nq + ib) * bqp * D);
  const float* lse2 = block_values(packed_->lse2.data() + h * d.Tq + i0, rows, bqp,
                                   std::numeric_limits<float>::infinity(), sc.lse2.data());
  const float* dl = block_values(c.delta + h * d.Tq + i0, rows, bqp, 0.0f, sc.delta.data());
  if (bf16_tiles_) {
    b.t16.q = packed_->q16.data() + off;
    b.t16.dout = packed_->dout16.data() + off;
    b.t16.ldq = D;
    b.t16.q2 = packed_->q2.data() + off;
    b.t16.dout2 = packed_->dout2.data() + off;
    b.t16.lse2 = lse2;
    b.t16.delta = dl;
  } else {
    b.t.q = packed_->qd.data() + off;
    b.t.dout = packed_->doutd.data() + off;
    b.t.ldq = D;
    b.t.lse2 = lse2;
    b.t.delta = dl;
  }
}

template void FlashAttention::forward(const AttnDims&, const float*, const float*, const float*,
                                      TokenTags, TokenTags, float*, float*);
template void FlashAttention::forward(const AttnDims&, const bf16*, const bf16*, const bf16*,
                                      TokenTags, TokenTags, float*, float*);
template void FlashAttention::backward(const AttnDims&, const float*, const float*, const float*,
                                       const float*, const float*, const float*, TokenTags,
                                       TokenTags, float*, float*, float*);
template void FlashAttention::backward(const AttnDims&, const bf16*, const bf16*, const bf16*,
                                       const float*, const float*, const bf16*, TokenTags,
                                       TokenTags, float*, float*, float*);

template <class T>
void attention_delta(const T* o, const T* dout, int64_t Tq, int64_t H, int64_t D, float* delta) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < Tq; ++i)
    for (int64_t h = 0; h < H; ++h) {
      const T* a = o + (i * H + h) * D;
      const T* b = dout + (i * H + h) * D;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int64_t c = 0; c < D; ++c) s += load_f32(a[c]) * load_f32(b[c]);
      delta[h * Tq + i] = s;
    }
}
template void attention_delta(const float*, const float*, int64_t, int64_t, int64_t, float*);
template void attention_delta(const bf16*, const bf16*, int64_t, int64_t, int64_t, float*);

void attention_merge(float* o, float* lse, const float* o_part, const float* lse_part, int64_t Tq,
                     int64_t H, int64_t D) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < Tq; ++i)
    for (int64_t h = 0; h < H; ++h) {
      const float l1 = lse[h * Tq + i], l2 = lse_part[h * Tq + i];
      if (l2 == kNegInf) continue;  // the part saw nothing: keep what we have
      float* a = o + (i * H + h) * D;
      const float* b = o_part + (i * H + h) * D;
      if (l1 == kNegInf) {  // we had nothing: take the part
        std::memcpy(a, b, size_t(D) * sizeof(float));
        lse[h * Tq + i] = l2;
        continue;
      }
      const float m = std::max(l1, l2);
      const float L = m + std::log1p(std::exp(-std::abs(l1 - l2)));
      const float w1 = std::exp(l1 - L), w2 = std::exp(l2 - L);
#pragma omp simd
      for (int64_t c = 0; c < D; ++c) a[c] = w1 * a[c] + w2 * b[c];
      lse[h * Tq + i] = L;
    }
}

}  // namespace lct
