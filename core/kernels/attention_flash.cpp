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

#include "common/error.hpp"
#include "kernels/attention.hpp"
#include "kernels/isa/kernels.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace lct {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
// Tags of packed tokens: a query of no document and a padding key never match anything.
constexpr int32_t kQueryNoDoc = INT32_MIN + 1, kKeyPadDoc = INT32_MIN;

// What a block of tokens spans, for whole-tile decisions.
struct BlockSpan {
  int32_t idx_min, idx_max, doc_min, doc_max;
  bool any_pad, all_pad;
};

std::vector<BlockSpan> spans(TokenTags t, int64_t n, int64_t block) {
  std::vector<BlockSpan> out;
  for (int64_t b = 0; b < n; b += block) {
    BlockSpan s{INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, false, true};
    for (int64_t i = b; i < std::min(n, b + block); ++i) {
      s.idx_min = std::min(s.idx_min, t.idx[i]);
      s.idx_max = std::max(s.idx_max, t.idx[i]);
      if (t.doc[i] < 0) {
        s.any_pad = true;
        continue;
      }
      s.all_pad = false;
      s.doc_min = std::min(s.doc_min, t.doc[i]);
      s.doc_max = std::max(s.doc_max, t.doc[i]);
    }
    out.push_back(s);
  }
  return out;
}

enum class Tile { Skip, Full, Masked };

Tile classify(const BlockSpan& q, const BlockSpan& k) {
  if (q.all_pad || k.all_pad || k.idx_min > q.idx_max || k.doc_min > q.doc_max ||
      q.doc_min > k.doc_max)
    return Tile::Skip;
  const bool one_doc = q.doc_min == q.doc_max && k.doc_min == k.doc_max && q.doc_min == k.doc_min;
  if (one_doc && !q.any_pad && !k.any_pad && k.idx_max <= q.idx_min) return Tile::Full;
  return Tile::Masked;
}

// The tile grid of one call: block spans and what each (query block, key block) pair is.
struct Grid {
  std::vector<BlockSpan> qs, ks;
  int64_t nq, nk, BQ, BK;
  Grid(const AttnDims& d, TokenTags qt, TokenTags kt, AttnBlocks b)
      : qs(spans(qt, d.Tq, b.q)), ks(spans(kt, d.Tk, b.k)), nq(int64_t(qs.size())),
        nk(int64_t(ks.size())), BQ(b.q), BK(b.k) {}
  Tile tile(int64_t ib, int64_t jb) const { return classify(qs[size_t(ib)], ks[size_t(jb)]); }
  int64_t rows(int64_t ib, int64_t Tq) const { return std::min(BQ, Tq - ib * BQ); }
  int64_t cols(int64_t jb, int64_t Tk) const { return std::min(BK, Tk - jb * BK); }
  // The first key block at or after `from` that query block ib sees (nk if none).
  int64_t next_visible(int64_t ib, int64_t from) const {
    while (from < nk && tile(ib, from) == Tile::Skip) ++from;
    return from;
  }
};

void pause_cpu() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

}  // namespace

// Per-thread scratch (floats unless said): one query block's operands and state.
struct FlashAttention::Scratch {
  Buffer<float> q, dout, acc, dq;      // [bqp, D]; dq [G, bqp, D]
  Buffer<float> m, l, lse2, delta;     // [bqp]
  Buffer<int32_t> qidx, qdoc;          // [bqp]
  Buffer<float> p, ds;                 // [bqp, np]
  Buffer<float> dk, dv;                // [np, D]
};

// Keys and values of every (KV head, key block), packed for the micro-kernels, and the
// per-(KV head, query block) turn of backward's dQ sum.
struct FlashAttention::Packed {
  Buffer<float> kt, vt;   // [KV, nk, D, np]
  Buffer<float> k, v;     // [KV, nk, np, D]
  Buffer<int32_t> kidx, kdoc;  // [nk, np]
  std::unique_ptr<std::atomic<int64_t>[]> turn;  // [KV, nq]: key block whose dQ goes next
};

FlashAttention::FlashAttention(const AttnLimits& lim, AttnBlocks blocks, Isa isa)
    : lim_(lim), blocks_(blocks), packed_(std::make_unique<Packed>()) {
  if (blocks.q < 1 || blocks.k < 1) fail("attention blocks must be at least 1 (got ", blocks.q, " x ", blocks.k, ")");
  if (lim.heads % lim.kv_heads != 0) fail("attention: ", lim.heads, " heads are not a multiple of ", lim.kv_heads, " KV heads");
  kern_ = isa_kernels(isa);
  if (!kern_) fail("this build of lctrain has no '", int(isa), "' kernels");
  if (lim.head_dim % kern_->width != 0) kern_ = isa_kernels(Isa::Generic);
  const int64_t R = kern_->strip_rows, NC = kern_->key_chunk, D = lim.head_dim;
  np_ = (blocks.k + NC - 1) / NC * NC;
  bqp_ = (blocks.q + R - 1) / R * R;
  const int64_t nk = (lim.max_tk + blocks.k - 1) / blocks.k, nq = (lim.max_tq + blocks.q - 1) / blocks.q;
  const size_t kv_floats = size_t(lim.kv_heads * nk * np_ * D);
  Packed& pk = *packed_;
  pk.kt = Buffer<float>(kv_floats);
  pk.vt = Buffer<float>(kv_floats);
  pk.k = Buffer<float>(kv_floats);
  pk.v = Buffer<float>(kv_floats);
  pk.kidx = Buffer<int32_t>(size_t(nk * np_));
  pk.kdoc = Buffer<int32_t>(size_t(nk * np_));
  pk.turn = std::make_unique<std::atomic<int64_t>[]>(size_t(std::max<int64_t>(1, lim.kv_heads * nq)));

  const int threads = omp_get_max_threads();
  const size_t G = size_t(lim.heads / lim.kv_heads), bq = size_t(bqp_), d = size_t(D), np = size_t(np_);
  scratch_.resize(size_t(threads));
#pragma omp parallel num_threads(threads)
  {
    // Allocated (and so first touched) by the thread that uses it.
    Scratch& s = scratch_[size_t(omp_get_thread_num())];
    s.q = Buffer<float>(bq * d);
    s.dout = Buffer<float>(bq * d);
    s.acc = Buffer<float>(bq * d);
    s.dq = Buffer<float>(G * bq * d);
    s.m = Buffer<float>(bq);
    s.l = Buffer<float>(bq);
    s.lse2 = Buffer<float>(bq);
    s.delta = Buffer<float>(bq);
    s.qidx = Buffer<int32_t>(bq);
    s.qdoc = Buffer<int32_t>(bq);
    s.p = Buffer<float>(bq * np);
    s.ds = Buffer<float>(bq * np);
    s.dk = Buffer<float>(np * d);
    s.dv = Buffer<float>(np * d);
  }
}

FlashAttention::~FlashAttention() = default;

Isa FlashAttention::isa() const { return kern_->isa; }

size_t FlashAttention::workspace_bytes_for(const AttnLimits& lim, AttnBlocks b, int threads) {
  // Upper bound over the ISAs: the widest chunk (64 keys) and strip (4 rows) pad the most.
  const int64_t np = (b.k + 63) / 64 * 64, bqp = (b.q + 3) / 4 * 4, D = lim.head_dim;
  const int64_t nk = (lim.max_tk + b.k - 1) / b.k, G = lim.heads / lim.kv_heads;
  const int64_t per_thread = bqp * D * (3 + G) + 6 * bqp + 2 * bqp * np + 2 * np * D;
  const int64_t shared = 4 * lim.kv_heads * nk * np * D + 2 * nk * np;
  return size_t(per_thread * threads + shared) * sizeof(float);
}

size_t FlashAttention::workspace_bytes() const {
  size_t n = packed_->kt.size() * 4 + packed_->kidx.size() * 2;
  for (const Scratch& s : scratch_)
    n += s.q.size() + s.dout.size() + s.acc.size() + s.dq.size() + s.m.size() + s.l.size() +
         s.lse2.size() + s.delta.size() + s.qidx.size() + s.qdoc.size() + s.p.size() +
         s.ds.size() + s.dk.size() + s.dv.size();
  return n * sizeof(float);
}

void FlashAttention::check(const AttnDims& d) const {
  if (d.Tq > lim_.max_tq || d.Tk > lim_.max_tk || d.H != lim_.heads || d.KV != lim_.kv_heads ||
      d.D != lim_.head_dim)
    fail("attention call [Tq ", d.Tq, ", Tk ", d.Tk, ", H ", d.H, ", KV ", d.KV, ", D ", d.D,
         "] exceeds the kernel's limits [", lim_.max_tq, ", ", lim_.max_tk, ", ", lim_.heads, ", ",
         lim_.kv_heads, ", ", lim_.head_dim, "]");
}

// kt/vt [D][np] and k/v [np][D] per (KV head, key block), zero beyond the block's keys;
// key tags [np] with padding that matches no query.
void FlashAttention::pack_keys(const AttnDims& d, const float* k, const float* v, TokenTags kt,
                               bool backward) {
  const int64_t D = d.D, ldk = d.KV * D, np = np_, BK = blocks_.k;
  const int64_t nk = (d.Tk + BK - 1) / BK;
  Packed& pk = *packed_;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < d.KV * nk; ++task) {
    const int64_t g = task / nk, jb = task % nk, j0 = jb * BK, cols = std::min(BK, d.Tk - j0);
    const size_t off = size_t(task * np * D);
    float *kt_ = pk.kt.data() + off, *vt = pk.vt.data() + off, *kk = pk.k.data() + off,
          *vv = pk.v.data() + off;
    for (int64_t c = 0; c < np; ++c) {
      const float* ks = k + (j0 + c) * ldk + g * D;
      const float* vs = v + (j0 + c) * ldk + g * D;
      const bool real = c < cols;
      for (int64_t x = 0; x < D; ++x) {
        kt_[x * np + c] = real ? ks[x] : 0.0f;
        vv[c * D + x] = real ? vs[x] : 0.0f;
        if (backward) {
          vt[x * np + c] = real ? vs[x] : 0.0f;
          kk[c * D + x] = real ? ks[x] : 0.0f;
        }
      }
      if (g == 0) {
        pk.kidx[size_t(jb * np + c)] = real ? kt.idx[j0 + c] : INT32_MAX;
        pk.kdoc[size_t(jb * np + c)] = real ? kt.doc[j0 + c] : kKeyPadDoc;
      }
    }
  }
}

namespace {

// One query block of one head into scratch: q pre-scaled into log2 units, zero rows beyond
// the block, tags with "no document" for padding rows.
void pack_queries(const float* q, int64_t ldq, int64_t rows, int64_t bqp, int64_t D, float mult,
                  TokenTags qt, int64_t i0, float* out, int32_t* qidx, int32_t* qdoc) {
  for (int64_t r = 0; r < bqp; ++r) {
    float* o = out + r * D;
    if (r < rows) {
      const float* src = q + (i0 + r) * ldq;
      for (int64_t x = 0; x < D; ++x) o[x] = src[x] * mult;
      qidx[r] = qt.idx[i0 + r];
      qdoc[r] = qt.doc[i0 + r] < 0 ? kQueryNoDoc : qt.doc[i0 + r];
    } else {
      std::memset(o, 0, size_t(D) * sizeof(float));
      qidx[r] = 0;
      qdoc[r] = kQueryNoDoc;
    }
  }
}

}  // namespace

void FlashAttention::forward(const AttnDims& d, const float* q, const float* k, const float* v,
                             TokenTags qt, TokenTags kt, float* o, float* lse) {
  check(d);
  const int64_t D = d.D, G = d.H / d.KV, ldq = d.H * D, np = np_, bqp = bqp_;
  const float mult = kLog2e / std::sqrt(float(D));
  const Grid grid(d, qt, kt, blocks_);
  pack_keys(d, k, v, kt, false);
  const Packed& pk = *packed_;

  // Query blocks costliest first (most visible key blocks), each for every head.
  std::vector<int64_t> cost(size_t(grid.nq), 0), order(size_t(grid.nq));
  for (int64_t ib = 0; ib < grid.nq; ++ib)
    for (int64_t jb = 0; jb < grid.nk; ++jb) cost[size_t(ib)] += grid.tile(ib, jb) != Tile::Skip;
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return cost[size_t(a)] > cost[size_t(b)]; });

#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < d.H * grid.nq; ++task) {
    const int64_t ib = order[size_t(task / d.H)], h = task % d.H, g = h / G;
    const int64_t i0 = ib * grid.BQ, rows = grid.rows(ib, d.Tq);
    const int thread = omp_get_thread_num();
    Scratch& sc = scratch_[size_t(thread)];
    pack_queries(q + h * D, ldq, rows, bqp, D, mult, qt, i0, sc.q.data(), sc.qidx.data(), sc.qdoc.data());
    std::fill(sc.m.data(), sc.m.data() + bqp, kNegInf);
    std::fill(sc.l.data(), sc.l.data() + bqp, 0.0f);
    std::fill(sc.acc.data(), sc.acc.data() + bqp * D, 0.0f);
    FlashFwdTile t;
    t.D = D;
    t.rows = bqp;
    t.np = np;
    t.q = sc.q.data();
    t.qidx = sc.qidx.data();
    t.qdoc = sc.qdoc.data();
    t.acc = sc.acc.data();
    t.m = sc.m.data();
    t.l = sc.l.data();
    t.scratch = sc.p.data();
    for (int64_t jb = 0; jb < grid.nk; ++jb) {
      const Tile kind = grid.tile(ib, jb);
      if (kind == Tile::Skip) continue;
      if (thread == 0 && progress_) progress_();
      const size_t off = size_t((g * grid.nk + jb) * np * D);
      t.kt = pk.kt.data() + off;
      t.v = pk.v.data() + off;
      t.kidx = pk.kidx.data() + jb * np;
      t.kdoc = pk.kdoc.data() + jb * np;
      t.masked = kind == Tile::Masked || grid.cols(jb, d.Tk) < np;  // padding keys are masked
      kern_->flash_fwd_tile(t);
    }
    for (int64_t r = 0; r < rows; ++r) {
      float* orow = o + (i0 + r) * ldq + h * D;
      const float l = sc.l[size_t(r)];
      if (l == 0.0f) {
        std::fill(orow, orow + D, 0.0f);
        lse[h * d.Tq + i0 + r] = kNegInf;
        continue;
      }
      const float inv = 1.0f / l;
      const float* acc = sc.acc.data() + r * D;
      for (int64_t x = 0; x < D; ++x) orow[x] = acc[x] * inv;
      lse[h * d.Tq + i0 + r] = (sc.m[size_t(r)] + std::log2(l)) * kLn2;
    }
  }
}

void FlashAttention::backward(const AttnDims& d, const float* q, const float* k, const float* v,
                              const float* lse, const float* delta, const float* dout,
                              TokenTags qt, TokenTags kt, float* dq, float* dk, float* dv) {
  check(d);
  const int64_t D = d.D, G = d.H / d.KV, ldq = d.H * D, ldk = d.KV * D, np = np_, bqp = bqp_;
  const float scale = 1.0f / std::sqrt(float(D)), mult = kLog2e * scale;
  const Grid grid(d, qt, kt, blocks_);
  pack_keys(d, k, v, kt, true);
  Packed& pk = *packed_;
  for (int64_t g = 0; g < d.KV; ++g)
    for (int64_t ib = 0; ib < grid.nq; ++ib)
      pk.turn[size_t(g * grid.nq + ib)].store(grid.next_visible(ib, 0), std::memory_order_relaxed);
  std::atomic<int64_t> next_task{0};
  const int64_t tasks = d.KV * grid.nk;

#pragma omp parallel
  {
    const int thread = omp_get_thread_num();
    Scratch& sc = scratch_[size_t(thread)];
    for (int64_t task = next_task.fetch_add(1); task < tasks; task = next_task.fetch_add(1)) {
      const int64_t g = task / grid.nk, jb = task % grid.nk;  // in order: (g, jb - 1) came first
      const int64_t j0 = jb * grid.BK, cols = grid.cols(jb, d.Tk);
      const size_t off = size_t(task * np * D);
      std::fill(sc.dk.data(), sc.dk.data() + np * D, 0.0f);
      std::fill(sc.dv.data(), sc.dv.data() + np * D, 0.0f);
      FlashBwdTile t;
      t.D = D;
      t.rows = bqp;
      t.np = np;
      t.q = sc.q.data();
      t.dout = sc.dout.data();
      t.lse2 = sc.lse2.data();
      t.delta = sc.delta.data();
      t.qidx = sc.qidx.data();
      t.qdoc = sc.qdoc.data();
      t.kt = pk.kt.data() + off;
      t.vt = pk.vt.data() + off;
      t.k = pk.k.data() + off;
      t.kidx = pk.kidx.data() + jb * np;
      t.kdoc = pk.kdoc.data() + jb * np;
      t.masked = cols < np;
      t.p = sc.p.data();
      t.ds = sc.ds.data();
      t.dk = sc.dk.data();
      t.dv = sc.dv.data();
      for (int64_t ib = 0; ib < grid.nq; ++ib) {
        const Tile kind = grid.tile(ib, jb);
        if (kind == Tile::Skip) continue;
        const int64_t i0 = ib * grid.BQ, rows = grid.rows(ib, d.Tq);
        t.masked = kind == Tile::Masked || cols < np;
        for (int64_t hh = 0; hh < G; ++hh) {
          const int64_t h = g * G + hh;
          if (thread == 0 && progress_) progress_();
          pack_queries(q + h * D, ldq, rows, bqp, D, mult, qt, i0, sc.q.data(), sc.qidx.data(), sc.qdoc.data());
          pack_queries(dout + h * D, ldq, rows, bqp, D, 1.0f, qt, i0, sc.dout.data(), sc.qidx.data(), sc.qdoc.data());
          for (int64_t r = 0; r < bqp; ++r) {
            const float L = r < rows ? lse[h * d.Tq + i0 + r] : kNegInf;
            sc.lse2[size_t(r)] = L == kNegInf ? std::numeric_limits<float>::infinity() : L * kLog2e;
            sc.delta[size_t(r)] = r < rows ? delta[h * d.Tq + i0 + r] : 0.0f;
          }
          t.dq = sc.dq.data() + hh * bqp * D;
          kern_->flash_bwd_tile(t);
        }
        // Our turn on this query block comes when every earlier key block has added its dQ.
        std::atomic<int64_t>& turn = pk.turn[size_t(g * grid.nq + ib)];
        while (turn.load(std::memory_order_acquire) != jb) {
          if (thread == 0 && progress_) progress_();
          pause_cpu();
        }
        for (int64_t hh = 0; hh < G; ++hh)
          for (int64_t r = 0; r < rows; ++r) {
            float* out = dq + (i0 + r) * ldq + (g * G + hh) * D;
            const float* src = sc.dq.data() + (hh * bqp + r) * D;
            for (int64_t x = 0; x < D; ++x) out[x] += scale * src[x];
          }
        turn.store(grid.next_visible(ib, jb + 1), std::memory_order_release);
      }
      for (int64_t c = 0; c < cols; ++c) {
        float* dkr = dk + (j0 + c) * ldk + g * D;
        float* dvr = dv + (j0 + c) * ldk + g * D;
        const float* a = sc.dk.data() + c * D;
        const float* b = sc.dv.data() + c * D;
        for (int64_t x = 0; x < D; ++x) {
          dkr[x] += kLn2 * a[x];
          dvr[x] += b[x];
        }
      }
    }
  }
}

void attention_delta(const float* o, const float* dout, int64_t Tq, int64_t H, int64_t D,
                     float* delta) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < Tq; ++i)
    for (int64_t h = 0; h < H; ++h) {
      const float* a = o + (i * H + h) * D;
      const float* b = dout + (i * H + h) * D;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int64_t c = 0; c < D; ++c) s += a[c] * b[c];
      delta[h * Tq + i] = s;
    }
}

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
