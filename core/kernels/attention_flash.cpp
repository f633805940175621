// Flash attention on CPUs: tiles of [block_q, block_k] scores, online softmax, GEMM-shaped
// inner products through single-threaded sgemm inside one coarse OpenMP region.
//
// Forward: one task per (head, query block), dynamic schedule, costliest first.
// Backward: per head, the key blocks are dealt to threads in a fixed zigzag (balanced under
// the causal mask); each key block's dK/dV is owned by one task, and each thread adds its
// dQ contributions to a private [Tq, D] buffer that is summed in thread order after the
// head. No atomics, 5 GEMMs per tile, and the result is the same in every run on the same
// thread count.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/attention.hpp"
#include "kernels/gemm.hpp"
#include "kernels/vexp.hpp"

namespace lct {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

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

// Sets the scores of invisible pairs to -inf. s [nq, nk] with leading dimension nk.
void apply_mask(float* s, TokenTags qt, int64_t i0, int64_t nq, TokenTags kt, int64_t j0,
                int64_t nk) {
  for (int64_t r = 0; r < nq; ++r) {
    const int32_t qd = qt.doc[i0 + r], qi = qt.idx[i0 + r];
    float* row = s + r * nk;
    for (int64_t c = 0; c < nk; ++c)
      if (qd < 0 || kt.doc[j0 + c] != qd || kt.idx[j0 + c] > qi) row[c] = kNegInf;
  }
}

}  // namespace

FlashAttention::FlashAttention(int64_t max_tq, int64_t D, AttnBlocks blocks)
    : blocks_(blocks), max_tq_(max_tq), D_(D) {
  const int threads = omp_get_max_threads();
  scratch_.resize(size_t(threads));
  const size_t bq = size_t(blocks.q), bk = size_t(blocks.k), d = size_t(D);
#pragma omp parallel num_threads(threads)
  {
    // Allocated (and so first touched) by the thread that uses it.
    Scratch& s = scratch_[size_t(omp_get_thread_num())];
    s.s = Buffer<float>(bq * bk);
    s.dp = Buffer<float>(bq * bk);
    s.acc = Buffer<float>(bq * d);
    s.m = Buffer<float>(bq);
    s.l = Buffer<float>(bq);
    s.dq = Buffer<float>(size_t(max_tq) * d);
  }
}

size_t FlashAttention::workspace_bytes_for(int64_t max_tq, int64_t D, AttnBlocks b, int threads) {
  const size_t per = size_t(2 * b.q * b.k + b.q * D + 2 * b.q + max_tq * D);
  return per * size_t(threads) * sizeof(float);
}

size_t FlashAttention::workspace_bytes() const {
  size_t n = 0;
  for (const Scratch& s : scratch_)
    n += s.s.size() + s.dp.size() + s.acc.size() + s.m.size() + s.l.size() + s.dq.size();
  return n * sizeof(float);
}

void FlashAttention::forward(const AttnDims& d, const float* q, const float* k, const float* v,
                             TokenTags qt, TokenTags kt, float* o, float* lse) {
  const int64_t BQ = blocks_.q, BK = blocks_.k, D = d.D, G = d.H / d.KV;
  const int64_t ldq = d.H * D, ldk = d.KV * D;
  const float scale = 1.0f / std::sqrt(float(D));
  const std::vector<BlockSpan> qs = spans(qt, d.Tq, BQ), ks = spans(kt, d.Tk, BK);
  const int64_t nq = int64_t(qs.size()), nk = int64_t(ks.size());

#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < d.H * nq; ++task) {
    const int64_t h = task % d.H, ib = nq - 1 - task / d.H;  // late query blocks cost most
    const int64_t i0 = ib * BQ, rows = std::min(BQ, d.Tq - i0);
    const int64_t g = h / G;
    const int thread = omp_get_thread_num();
    Scratch& sc = scratch_[size_t(thread)];
    float *s = sc.s.data(), *acc = sc.acc.data(), *m = sc.m.data(), *l = sc.l.data();
    std::fill(m, m + rows, kNegInf);
    std::fill(l, l + rows, 0.0f);
    std::fill(acc, acc + rows * D, 0.0f);
    const float* qb = q + i0 * ldq + h * D;

    for (int64_t jb = 0; jb < nk; ++jb) {
      const Tile tile = classify(qs[size_t(ib)], ks[size_t(jb)]);
      if (tile == Tile::Skip) continue;
      const int64_t j0 = jb * BK, cols = std::min(BK, d.Tk - j0);
      if (thread == 0 && progress_) progress_();
      // S = scale * Q_i K_j^T   [rows, cols]
      sgemm_serial(false, true, rows, cols, D, scale, qb, ldq, k + j0 * ldk + g * D, ldk, 0.0f, s,
                   cols);
      if (tile == Tile::Masked) apply_mask(s, qt, i0, rows, kt, j0, cols);
      for (int64_t r = 0; r < rows; ++r) {
        float* row = s + r * cols;
        const float row_max = *std::max_element(row, row + cols);
        if (row_max == kNegInf) {  // this row sees nothing here: contributes nothing
          std::fill(row, row + cols, 0.0f);
          continue;
        }
        const float m_new = std::max(m[r], row_max);
        const float corr = std::exp(m[r] - m_new);  // 0 on the first visible tile
        l[r] = l[r] * corr + exp_shift_sum(row, cols, m_new);
        m[r] = m_new;
        if (corr != 1.0f)
          for (int64_t c = 0; c < D; ++c) acc[r * D + c] *= corr;
      }
      // acc += P V_j   [rows, D]
      sgemm_serial(false, false, rows, D, cols, 1.0f, s, cols, v + j0 * ldk + g * D, ldk, 1.0f, acc,
                   D);
    }
    for (int64_t r = 0; r < rows; ++r) {
      float* orow = o + (i0 + r) * ldq + h * D;
      if (l[r] == 0.0f) {
        std::fill(orow, orow + D, 0.0f);
        lse[h * d.Tq + i0 + r] = kNegInf;
        continue;
      }
      const float inv = 1.0f / l[r];
      for (int64_t c = 0; c < D; ++c) orow[c] = acc[r * D + c] * inv;
      lse[h * d.Tq + i0 + r] = m[r] + std::log(l[r]);
    }
  }
}

void FlashAttention::backward(const AttnDims& d, const float* q, const float* k, const float* v,
                              const float* lse, const float* delta, const float* dout,
                              TokenTags qt, TokenTags kt, float* dq, float* dk, float* dv) {
  const int64_t BQ = blocks_.q, BK = blocks_.k, D = d.D, G = d.H / d.KV;
  const int64_t ldq = d.H * D, ldk = d.KV * D;
  const float scale = 1.0f / std::sqrt(float(D));
  const std::vector<BlockSpan> qs = spans(qt, d.Tq, BQ), ks = spans(kt, d.Tk, BK);
  const int64_t nq = int64_t(qs.size()), nk = int64_t(ks.size());
  const int threads = int(scratch_.size());

  for (int64_t h = 0; h < d.H; ++h) {
    const int64_t g = h / G;
    const float* lse_h = lse + h * d.Tq;
    const float* delta_h = delta + h * d.Tq;
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num();
      Scratch& sc = scratch_[size_t(t)];
      float *p = sc.s.data(), *dp = sc.dp.data(), *dq_own = sc.dq.data();
      std::memset(dq_own, 0, size_t(d.Tq * D) * sizeof(float));
      for (int64_t jb = 0; jb < nk; ++jb) {
        const int64_t lane = jb % (2 * threads);
        if (lane != t && lane != 2 * threads - 1 - t) continue;  // zigzag deal
        const int64_t j0 = jb * BK, cols = std::min(BK, d.Tk - j0);
        const float* kb = k + j0 * ldk + g * D;
        const float* vb = v + j0 * ldk + g * D;
        float* dkb = dk + j0 * ldk + g * D;
        float* dvb = dv + j0 * ldk + g * D;
        for (int64_t ib = 0; ib < nq; ++ib) {
          const Tile tile = classify(qs[size_t(ib)], ks[size_t(jb)]);
          if (tile == Tile::Skip) continue;
          if (t == 0 && progress_) progress_();
          const int64_t i0 = ib * BQ, rows = std::min(BQ, d.Tq - i0);
          const float* qb = q + i0 * ldq + h * D;
          const float* dob = dout + i0 * ldq + h * D;
          // P = exp(scale * Q_i K_j^T - lse)   [rows, cols]
          sgemm_serial(false, true, rows, cols, D, scale, qb, ldq, kb, ldk, 0.0f, p, cols);
          if (tile == Tile::Masked) apply_mask(p, qt, i0, rows, kt, j0, cols);
          for (int64_t r = 0; r < rows; ++r) {
            const float L = lse_h[i0 + r];
            if (L == kNegInf) std::fill(p + r * cols, p + (r + 1) * cols, 0.0f);
            else exp_shift_sum(p + r * cols, cols, L);
          }
          // dV_j += P^T dO_i   [cols, D]
          sgemm_serial(true, false, cols, D, rows, 1.0f, p, cols, dob, ldq, 1.0f, dvb, ldk);
          // dP = dO_i V_j^T   [rows, cols];  dS = P * (dP - delta)
          sgemm_serial(false, true, rows, cols, D, 1.0f, dob, ldq, vb, ldk, 0.0f, dp, cols);
          for (int64_t r = 0; r < rows; ++r) {
            const float dl = delta_h[i0 + r];
            float* ds = dp + r * cols;
            const float* pr = p + r * cols;
#pragma omp simd
            for (int64_t c = 0; c < cols; ++c) ds[c] = pr[c] * (ds[c] - dl);
          }
          // dQ_i += scale dS K_j   [rows, D]  (this thread's private rows)
          sgemm_serial(false, false, rows, D, cols, scale, dp, cols, kb, ldk, 1.0f, dq_own + i0 * D, D);
          // dK_j += scale dS^T Q_i   [cols, D]
          sgemm_serial(true, false, cols, D, rows, scale, dp, cols, qb, ldq, 1.0f, dkb, ldk);
        }
      }
#pragma omp barrier
      // dQ[:, h] += sum of the private buffers, in thread order.
#pragma omp for schedule(static)
      for (int64_t i = 0; i < d.Tq; ++i) {
        float* out = dq + i * ldq + h * D;
        for (int th = 0; th < threads; ++th) {
          const float* src = scratch_[size_t(th)].dq.data() + i * D;
#pragma omp simd
          for (int64_t c = 0; c < D; ++c) out[c] += src[c];
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

}  // namespace lct

namespace lct {

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
