#include "kernels/layers.hpp"

#include <omp.h>

#include <cmath>
#include <cstring>

#include "kernels/vexp.hpp"

namespace lct {

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t T, int64_t C,
                     float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * C;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) ss += xt[c] * xt[c];
    const float r = 1.0f / std::sqrt(ss / float(C) + eps);
    rstd[t] = r;
    float* yt = y + t * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) yt[c] = xt[c] * r * w[c];
  }
}

void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* rstd,
                      const float* w, int64_t T, int64_t C, bool accumulate_dx) {
  const int threads = omp_get_max_threads();
  std::vector<float> partial(size_t(threads) * size_t(C), 0.0f);  // [threads, C]
#pragma omp parallel num_threads(threads)
  {
    float* dw_t = partial.data() + size_t(omp_get_thread_num()) * size_t(C);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      const float* xt = x + t * C;
      const float* dyt = dy + t * C;
      const float r = rstd[t];
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t c = 0; c < C; ++c) dot += dyt[c] * w[c] * xt[c];
      const float k = dot * r * r / float(C);
      float* dxt = dx + t * C;
      if (accumulate_dx) {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) dxt[c] += r * (dyt[c] * w[c] - xt[c] * k);
      } else {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) dxt[c] = r * (dyt[c] * w[c] - xt[c] * k);
      }
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dw_t[c] += dyt[c] * xt[c] * r;
    }
  }
  for (int th = 0; th < threads; ++th)  // fixed order: deterministic
    for (int64_t c = 0; c < C; ++c) dw[c] += partial[size_t(th) * size_t(C) + size_t(c)];
}

RopeTable::RopeTable(int64_t max_pos, int64_t head_dim, double theta)
    : max_pos_(max_pos), half_(head_dim / 2) {
  cos_.resize(size_t(max_pos * half_));
  sin_.resize(size_t(max_pos * half_));
  for (int64_t i = 0; i < half_; ++i) {
    const double inv_freq = std::pow(theta, -2.0 * double(i) / double(head_dim));
    for (int64_t p = 0; p < max_pos; ++p) {
      const double a = double(p) * inv_freq;
      cos_[size_t(p * half_ + i)] = float(std::cos(a));
      sin_[size_t(p * half_ + i)] = float(std::sin(a));
    }
  }
}

void RopeTable::rotate(float* x, const int32_t* pos, int64_t T, int64_t heads, float sign) const {
  const int64_t D = 2 * half_, half = half_;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const float* c = cos_.data() + int64_t(pos[t]) * half;
    const float* s = sin_.data() + int64_t(pos[t]) * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* a = x + (t * heads + h) * D;
      float* b = a + half;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float ai = a[i], bi = b[i], si = sign * s[i];
        a[i] = ai * c[i] - bi * si;
        b[i] = bi * c[i] + ai * si;
      }
    }
  }
}

void RopeTable::forward(float* x, const int32_t* pos, int64_t T, int64_t heads) const {
  rotate(x, pos, T, heads, 1.0f);
}
void RopeTable::backward(float* dx, const int32_t* pos, int64_t T, int64_t heads) const {
  rotate(dx, pos, T, heads, -1.0f);  // the transpose of a rotation is its inverse
}

namespace {
// sigmoid over n values: s[i] = 1 / (1 + exp(-g[i]))
inline void sigmoid(float* s, const float* g, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp256(_mm256_sub_ps(zero, _mm256_loadu_ps(g + i)));
    _mm256_storeu_ps(s + i, _mm256_div_ps(one, _mm256_add_ps(one, e)));
  }
#endif
  for (; i < n; ++i) s[i] = 1.0f / (1.0f + std::exp(-g[i]));
}
constexpr int64_t kChunk = 4096;  // elements per task: fits L1 with its sigmoid
}  // namespace

void swiglu_forward(float* h, const float* gate, const float* up, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < n; b += kChunk) {
    const int64_t m = std::min(kChunk, n - b);
    float s[kChunk];
    sigmoid(s, gate + b, m);
#pragma omp simd
    for (int64_t i = 0; i < m; ++i) h[b + i] = gate[b + i] * s[i] * up[b + i];
  }
}

void swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up,
                     int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < n; b += kChunk) {
    const int64_t m = std::min(kChunk, n - b);
    float s[kChunk];
    sigmoid(s, gate + b, m);
#pragma omp simd
    for (int64_t i = 0; i < m; ++i) {
      const float g = gate[b + i], si = s[i], d = dh[b + i];
      dup[b + i] = d * g * si;
      dgate[b + i] = d * up[b + i] * si * (1.0f + g * (1.0f - si));
    }
  }
}

void embedding_forward(float* x, const int32_t* tokens, const float* table, int64_t T, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(x + t * C, table + int64_t(tokens[t]) * C, size_t(C) * sizeof(float));
}

void embedding_backward(float* dtable, const int32_t* tokens, const float* dx, int64_t T, int64_t C) {
  const int threads = omp_get_max_threads();
  const int64_t per = (C + threads - 1) / threads;
#pragma omp parallel num_threads(threads)
  {
    const int64_t c0 = std::min(C, per * omp_get_thread_num()), c1 = std::min(C, c0 + per);
    for (int64_t t = 0; t < T; ++t) {
      float* row = dtable + int64_t(tokens[t]) * C;
      const float* g = dx + t * C;
      for (int64_t c = c0; c < c1; ++c) row[c] += g[c];
    }
  }
}

void add(float* y, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

}  // namespace lct
