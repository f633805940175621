#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attention.hpp"

namespace lct {

namespace {
// The definition in attention.hpp, written out: same document, causal, inside the window.
inline bool visible(const AttnDims& d, TokenTags qt, int64_t i, TokenTags kt, int64_t j) {
  return qt.doc[i] >= 0 && qt.doc[i] == kt.doc[j] && kt.idx[j] <= qt.idx[i] &&
         (d.window == 0 || int64_t(qt.idx[i]) - int64_t(kt.idx[j]) < d.window);
}
}  // namespace

void attention_reference_forward(const AttnDims& d, const float* q, const float* k, const float* v,
                                 TokenTags qt, TokenTags kt, float* o, float* lse) {
  const int64_t D = d.D, G = d.H / d.KV;
  const double scale = 1.0 / std::sqrt(double(D));
#pragma omp parallel for schedule(dynamic) collapse(2)
  for (int64_t h = 0; h < d.H; ++h)
    for (int64_t i = 0; i < d.Tq; ++i) {
      const float* qi = q + (i * d.H + h) * D;
      const int64_t g = h / G;
      std::vector<double> s(size_t(d.Tk));
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < d.Tk; ++j) {
        if (!visible(d, qt, i, kt, j)) continue;
        const float* kj = k + (j * d.KV + g) * D;
        double dot = 0;
        for (int64_t c = 0; c < D; ++c) dot += double(qi[c]) * kj[c];
        s[size_t(j)] = dot * scale;
        m = std::max(m, s[size_t(j)]);
      }
      float* oi = o + (i * d.H + h) * D;
      if (m == -std::numeric_limits<double>::infinity()) {
        for (int64_t c = 0; c < D; ++c) oi[c] = 0.0f;
        lse[h * d.Tq + i] = -std::numeric_limits<float>::infinity();
        continue;
      }
      std::vector<double> acc(size_t(D), 0.0);
      double sum = 0;
      for (int64_t j = 0; j < d.Tk; ++j) {
        if (!visible(d, qt, i, kt, j)) continue;
        const double p = std::exp(s[size_t(j)] - m);
        sum += p;
        const float* vj = v + (j * d.KV + g) * D;
        for (int64_t c = 0; c < D; ++c) acc[size_t(c)] += p * vj[c];
      }
      for (int64_t c = 0; c < D; ++c) oi[c] = float(acc[size_t(c)] / sum);
      lse[h * d.Tq + i] = float(m + std::log(sum));
    }
}

void attention_reference_backward(const AttnDims& d, const float* q, const float* k,
                                  const float* v, const float* dout, TokenTags qt, TokenTags kt,
                                  float* dq, float* dk, float* dv) {
  const int64_t D = d.D, G = d.H / d.KV;
  const double scale = 1.0 / std::sqrt(double(D));
  // Each key/value head owns its dk/dv slice: parallel over them.
#pragma omp parallel for schedule(dynamic)
  for (int64_t g = 0; g < d.KV; ++g) {
    std::vector<double> dkg(size_t(d.Tk * D), 0.0), dvg(size_t(d.Tk * D), 0.0);
    std::vector<double> p(size_t(d.Tk)), dp(size_t(d.Tk));
    for (int64_t h = g * G; h < (g + 1) * G; ++h)
      for (int64_t i = 0; i < d.Tq; ++i) {
        const float* qi = q + (i * d.H + h) * D;
        const float* doi = dout + (i * d.H + h) * D;
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < d.Tk; ++j) {
          p[size_t(j)] = -std::numeric_limits<double>::infinity();
          if (!visible(d, qt, i, kt, j)) continue;
          const float* kj = k + (j * d.KV + g) * D;
          double dot = 0;
          for (int64_t c = 0; c < D; ++c) dot += double(qi[c]) * kj[c];
          p[size_t(j)] = dot * scale;
          m = std::max(m, p[size_t(j)]);
        }
        if (m == -std::numeric_limits<double>::infinity()) continue;  // sees nothing: no grads
        double sum = 0;
        for (int64_t j = 0; j < d.Tk; ++j) sum += p[size_t(j)] = std::exp(p[size_t(j)] - m);
        double delta = 0;
        for (int64_t j = 0; j < d.Tk; ++j) {
          p[size_t(j)] /= sum;
          if (p[size_t(j)] == 0.0) continue;
          const float* vj = v + (j * d.KV + g) * D;
          double dot = 0;
          for (int64_t c = 0; c < D; ++c) dot += double(doi[c]) * vj[c];
          dp[size_t(j)] = dot;
          delta += p[size_t(j)] * dot;
        }
        std::vector<double> dqi(size_t(D), 0.0);
        for (int64_t j = 0; j < d.Tk; ++j) {
          const double pj = p[size_t(j)];
          if (pj == 0.0) continue;
          const double ds = pj * (dp[size_t(j)] - delta) * scale;
          const float* kj = k + (j * d.KV + g) * D;
          for (int64_t c = 0; c < D; ++c) {
            dqi[size_t(c)] += ds * kj[c];
            dkg[size_t(j * D + c)] += ds * qi[c];
            dvg[size_t(j * D + c)] += pj * doi[c];
          }
        }
        float* dqo = dq + (i * d.H + h) * D;
        for (int64_t c = 0; c < D; ++c) dqo[c] += float(dqi[size_t(c)]);
      }
    for (int64_t j = 0; j < d.Tk; ++j)
      for (int64_t c = 0; c < D; ++c) {
        dk[(j * d.KV + g) * D + c] += float(dkg[size_t(j * D + c)]);
        dv[(j * d.KV + g) * D + c] += float(dvg[size_t(j * D + c)]);
      }
  }
}

}  // namespace lct
