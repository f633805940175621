#include "kernels/layers.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/isa/kernels.hpp"

namespace lct {

template <class X>
void rmsnorm_forward(X* y, float* rstd, const float* x, const float* w, int64_t T, int64_t C,
                     float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * C;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) ss += xt[c] * xt[c];
    const float r = 1.0f / std::sqrt(ss / float(C) + eps);
    rstd[t] = r;
    X* yt = y + t * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) store_as(yt + c, xt[c] * r * w[c]);
  }
}
template void rmsnorm_forward(float*, float*, const float*, const float*, int64_t, int64_t, float);
template void rmsnorm_forward(bf16*, float*, const float*, const float*, int64_t, int64_t, float);

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

RopeTable::RopeTable(int64_t max_pos, const std::vector<double>& inv_freq, double attention_factor)
    : max_pos_(max_pos), half_(int64_t(inv_freq.size())) {
  cos_.resize(size_t(max_pos * half_));
  sin_.resize(size_t(max_pos * half_));
  for (int64_t i = 0; i < half_; ++i) {
    for (int64_t p = 0; p < max_pos; ++p) {
      const double a = double(p) * inv_freq[size_t(i)];
      cos_[size_t(p * half_ + i)] = float(std::cos(a) * attention_factor);
      sin_[size_t(p * half_ + i)] = float(std::sin(a) * attention_factor);
    }
  }
}

template <class X>
void RopeTable::rotate(const float* x, X* out, const int32_t* pos, int64_t T, int64_t heads,
                       float sign) const {
  const int64_t D = 2 * half_, half = half_;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const float* c = cos_.data() + int64_t(pos[t]) * half;
    const float* s = sin_.data() + int64_t(pos[t]) * half;
    for (int64_t h = 0; h < heads; ++h) {
      const float* a = x + (t * heads + h) * D;
      const float* b = a + half;
      X* oa = out + (t * heads + h) * D;
      X* ob = oa + half;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float ai = a[i], bi = b[i], si = sign * s[i];
        store_as(oa + i, ai * c[i] - bi * si);
        store_as(ob + i, bi * c[i] + ai * si);
      }
    }
  }
}

void RopeTable::forward(float* x, const int32_t* pos, int64_t T, int64_t heads) const {
  rotate(x, x, pos, T, heads, 1.0f);
}
void RopeTable::backward(float* dx, const int32_t* pos, int64_t T, int64_t heads) const {
  rotate(dx, dx, pos, T, heads, -1.0f);  // the transpose of a rotation is its inverse
}
template <class X>
void RopeTable::forward(const float* x, X* out, const int32_t* pos, int64_t T, int64_t heads) const {
  rotate(x, out, pos, T, heads, 1.0f);
}
template void RopeTable::forward(const float*, float*, const int32_t*, int64_t, int64_t) const;
template void RopeTable::forward(const float*, bf16*, const int32_t*, int64_t, int64_t) const;

namespace {
// The ISA's table, the portable one where this build has none for `isa`.
const IsaKernels& kernels_for(Isa isa) {
  const IsaKernels* k = isa_kernels(isa);
  return k ? *k : *isa_kernels(Isa::Generic);
}

// Calls part(lo, hi) on each OpenMP thread for its contiguous share of [0, n), cut at
// multiples of 64 values (whole cache lines in either type).
template <class Part>
void split_over_threads(int64_t n, Part&& part) {
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads(), lines = (n + 63) / 64;
    const int64_t lo = std::min(n, lines * t / nt * 64), hi = std::min(n, lines * (t + 1) / nt * 64);
    if (lo < hi) part(lo, hi);
  }
}

void swiglu_forward_part(const IsaKernels& k, float* h, const float* g, const float* u, int64_t n) {
  k.swiglu_forward(h, g, u, n);
}
void swiglu_forward_part(const IsaKernels& k, bf16* h, const bf16* g, const bf16* u, int64_t n) {
  k.swiglu_forward_bf16(h, g, u, n);
}
void swiglu_backward_part(const IsaKernels& k, float* dg, float* du, const float* dh, const float* g,
                          const float* u, int64_t n) {
  k.swiglu_backward(dg, du, dh, g, u, n);
}
void swiglu_backward_part(const IsaKernels& k, bf16* dg, bf16* du, const bf16* dh, const bf16* g, const bf16* u,
                          int64_t n) {
  k.swiglu_backward_bf16(dg, du, dh, g, u, n);
}
}  // namespace

template <class X>
void swiglu_forward(Isa isa, X* h, const X* gate, const X* up, int64_t n) {
  const IsaKernels& k = kernels_for(isa);
  split_over_threads(n, [&](int64_t lo, int64_t hi) { swiglu_forward_part(k, h + lo, gate + lo, up + lo, hi - lo); });
}

template <class X>
void swiglu_backward(Isa isa, X* dgate, X* dup, const X* dh, const X* gate, const X* up, int64_t n) {
  const IsaKernels& k = kernels_for(isa);
  split_over_threads(n, [&](int64_t lo, int64_t hi) {
    swiglu_backward_part(k, dgate + lo, dup + lo, dh + lo, gate + lo, up + lo, hi - lo);
  });
}
template void swiglu_forward(Isa, float*, const float*, const float*, int64_t);
template void swiglu_forward(Isa, bf16*, const bf16*, const bf16*, int64_t);
template void swiglu_backward(Isa, float*, float*, const float*, const float*, const float*, int64_t);
template void swiglu_backward(Isa, bf16*, bf16*, const bf16*, const bf16*, const bf16*, int64_t);

void embedding_forward(float* x, const int32_t* tokens, const float* table, int64_t T, int64_t C,
                       int64_t v0, int64_t V) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const int64_t row = int64_t(tokens[t]) - v0;
    if (row >= 0 && row < V) std::memcpy(x + t * C, table + row * C, size_t(C) * sizeof(float));
    else std::memset(x + t * C, 0, size_t(C) * sizeof(float));
  }
}

void embedding_backward(float* dtable, const int32_t* tokens, const float* dx, int64_t T, int64_t C,
                        int64_t v0, int64_t V) {
  const int threads = omp_get_max_threads();
  const int64_t per = (C + threads - 1) / threads;
#pragma omp parallel num_threads(threads)
  {
    const int64_t c0 = std::min(C, per * omp_get_thread_num()), c1 = std::min(C, c0 + per);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t r = int64_t(tokens[t]) - v0;
      if (r < 0 || r >= V) continue;
      float* row = dtable + r * C;
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
