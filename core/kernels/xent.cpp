#include "kernels/xent.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/gemm.hpp"
#include "kernels/vexp.hpp"
#include "kernels/tp_comm.hpp"

namespace lct {

LmHeadXent::LmHeadXent(int64_t max_tokens, int64_t V, Precision products, XentChunks chunks,
                       TpComm* tp, int64_t v0, bool sum_dx)
    : V_(V), chunks_(chunks), tp_(tp && tp->size() > 1 ? tp : nullptr), v0_(v0), sum_dx_(sum_dx) {
  chunks_.vocab = std::min(chunks_.vocab, V);
  chunks_.rows = std::min(chunks_.rows, max_tokens);
  logits_ = Buffer<float>(size_t(chunks_.rows * chunks_.vocab));
  if (products == Precision::Bf16) dlogits_ = Buffer<bf16>(logits_.size());
  lse_ = Buffer<float>(size_t(max_tokens));
  max_ = Buffer<float>(size_t(chunks_.rows));
  sum_ = Buffer<float>(size_t(chunks_.rows));
  target_logit_ = Buffer<float>(size_t(chunks_.rows));
  if (tp_) red_ = Buffer<float>(size_t(3 * chunks_.rows));
}

void LmHeadXent::combine_over_tp(int64_t R, int32_t* argmax) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float* gmax = red_.data();  // [R] the group's maxima
  float* sums = gmax + R;     // [2R] sums of exp (rescaled to gmax), target logits
  std::copy(max_.data(), max_.data() + R, gmax);
  tp_->all_reduce_max(gmax, R);
  for (int64_t r = 0; r < R; ++r) {
    sums[r] = sum_[size_t(r)] * std::exp(max_[size_t(r)] - gmax[r]);
    sums[R + r] = target_logit_[size_t(r)];  // 0 on every rank but the target's
  }
  tp_->all_reduce_sum(sums, 2 * R);
  if (argmax) {  // the lowest id among the ranks whose maximum is the group's
    float* cand = sums;  // reused: exact below 2^24 ids
    for (int64_t r = 0; r < R; ++r) {
      sum_[size_t(r)] = sums[r];
      cand[r] = max_[size_t(r)] == gmax[r] ? -float(argmax[r]) : neg_inf;
    }
    std::copy(sums + R, sums + 2 * R, target_logit_.data());
    tp_->all_reduce_max(cand, R);
    for (int64_t r = 0; r < R; ++r) argmax[r] = int32_t(-cand[r]);
  } else {
    std::copy(sums, sums + R, sum_.data());
    std::copy(sums + R, sums + 2 * R, target_logit_.data());
  }
  std::copy(gmax, gmax + R, max_.data());
}

size_t LmHeadXent::workspace_bytes_for(int64_t max_tokens, int64_t V, Precision products,
                                      XentChunks c) {
  const int64_t rows = std::min(c.rows, max_tokens), vocab = std::min(c.vocab, V);
  return size_t(rows * vocab + max_tokens + 3 * rows) * sizeof(float) +
         (products == Precision::Bf16 ? size_t(rows * vocab) * sizeof(bf16) : 0);
}

template <class X>
double LmHeadXent::run(const X* x, const X* w, const int32_t* targets, int64_t T, int64_t C,
                       float grad_scale, float* dx, float* dw, int32_t* argmax, float* token_loss,
                       const float* weights) {
  const int64_t RC = chunks_.rows, VC = chunks_.vocab, V = V_;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float* logits = logits_.data();
  double loss = 0.0;
  const int64_t vt = tp_ ? v0_ : 0;  // targets' id of this rank's first row
  for (int64_t r0 = 0; r0 < T; r0 += RC) {
    const int64_t R = std::min(RC, T - r0);
    const X* xr = x + r0 * C;
    std::fill(max_.data(), max_.data() + R, neg_inf);
    std::fill(sum_.data(), sum_.data() + R, 0.0f);
    std::fill(target_logit_.data(), target_logit_.data() + R, 0.0f);
    // Pass 1: log-sum-exp of every row, online over vocabulary chunks.
    for (int64_t v0 = 0; v0 < V; v0 += VC) {
      const int64_t n = std::min(VC, V - v0);
      gemm(false, true, R, n, C, 1.0f, xr, C, w + v0 * C, C, 0.0f, logits, n);
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < R; ++r) {
        float* row = logits + r * n;
        const int64_t tg = int64_t(targets[r0 + r]) - vt;
        if (tg >= v0 && tg < v0 + n) target_logit_[size_t(r)] = row[tg - v0];
        int64_t best = 0;
        for (int64_t j = 1; j < n; ++j) best = row[j] > row[best] ? j : best;
        const float m_old = max_[size_t(r)], m_new = std::max(m_old, row[best]);
        if (argmax && row[best] > m_old) argmax[r0 + r] = int32_t(vt + v0 + best);
        // without touching the logits: pass 2 may reuse them
        const float s = sum_exp_shift(row, n, m_new);
        sum_[size_t(r)] = sum_[size_t(r)] * std::exp(m_old - m_new) + s;
        max_[size_t(r)] = m_new;
      }
    }
    if (tp_) combine_over_tp(R, argmax ? argmax + r0 : nullptr);
    for (int64_t r = 0; r < R; ++r) {
      lse_[size_t(r0 + r)] = max_[size_t(r)] + std::log(sum_[size_t(r)]);
      const double wt = weights ? double(weights[r0 + r]) : 1.0;
      const double l = targets[r0 + r] >= 0
                           ? (double(lse_[size_t(r0 + r)]) - double(target_logit_[size_t(r)])) * wt
                           : 0.0;
      loss += l;
      if (token_loss) token_loss[r0 + r] = float(l);
    }
    if (!dx) continue;
    // Pass 2: dlogits = grad_scale * (softmax - onehot); logits recomputed unless one chunk
    // held the whole vocabulary.
    for (int64_t v0 = 0; v0 < V; v0 += VC) {
      const int64_t n = std::min(VC, V - v0);
      if (VC < V) gemm(false, true, R, n, C, 1.0f, xr, C, w + v0 * C, C, 0.0f, logits, n);
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < R; ++r) {
        float* row = logits + r * n;
        const int64_t tg = int64_t(targets[r0 + r]) - vt;
        // d(weighted sum)/dlogits = weight * (softmax - onehot)
        const float scale = weights ? grad_scale * weights[r0 + r] : grad_scale;
        if (targets[r0 + r] < 0 || scale == 0.0f) {  // masked out: exactly no gradient
          std::fill(row, row + n, 0.0f);
          continue;
        }
        exp_shift_sum(row, n, lse_[size_t(r0 + r)]);
        for (int64_t j = 0; j < n; ++j) row[j] *= scale;
        if (tg >= v0 && tg < v0 + n) row[tg - v0] -= scale;
      }
      // dlogits as the products' operand type (fp32 as is; bf16 rounded once)
      const X* dl;
      if constexpr (std::is_same_v<X, float>) dl = logits;
      else {
        convert(logits, dlogits_.data(), R * n);
        dl = dlogits_.data();
      }
      gemm(false, false, R, C, n, 1.0f, dl, n, w + v0 * C, C, v0 == 0 ? 0.0f : 1.0f, dx + r0 * C, C);
      gemm(true, false, n, C, R, 1.0f, dl, n, xr, C, 1.0f, dw + v0 * C, C);
    }
    if (tp_ && sum_dx_) tp_->all_reduce_sum(dx + r0 * C, R * C);  // every rank's vocabulary rows' part
  }
  return loss;
}

template double LmHeadXent::run(const float*, const float*, const int32_t*, int64_t, int64_t, float,
                                float*, float*, int32_t*, float*, const float*);
template double LmHeadXent::run(const bf16*, const bf16*, const int32_t*, int64_t, int64_t, float,
                                float*, float*, int32_t*, float*, const float*);

}  // namespace lct
