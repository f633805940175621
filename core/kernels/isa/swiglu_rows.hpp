// SwiGLU's element-wise part over n values (layers.hpp threads it): compiled once per ISA
// like the fused tiles, after simd.hpp. Every value goes through the same vector code, the
// last partial vector through a padded copy, so a value's result does not depend on where it
// sits in the array or how the caller splits it.
#pragma once
#include <algorithm>
#include <cstdint>

#include "common/bf16.hpp"

namespace lct::LCT_ISA_NS {

// Not store_product (softmax_rows.hpp): its vcvtneps2bf16 treats denormals as 0, and every
// path here stores exactly to_bf16's bits.
inline Simd::V load_values(const float* p) { return Simd::load(p); }
inline Simd::V load_values(const bf16* p) { return Simd::load_bf16(p); }
inline void store_values(float* p, Simd::V v) { Simd::store(p, v); }
inline void store_values(bf16* p, Simd::V v) { Simd::store_bf16(p, v); }

// sigmoid(g) = 1 / (1 + e^-g), with e^-g as 2^(-g log2 e): 0 where g is large, 1 where it is
// very negative (2^x of a large x is inf or about 2^127, 1 over it 0 or a denormal).
inline Simd::V sigmoid(Simd::V g) {
  const Simd::V one = Simd::set1(1.0f);
  return Simd::div(one, Simd::add(one, Simd::exp2(Simd::mul(g, Simd::set1(-1.44269504088896341f)))));
}

// Runs body(offset, in, out) over whole vectors of n values: in-place for the full ones, on
// zero-padded copies (ins, read; outs, written back) for the last partial one. Body reads
// `ins` pointers at offset and writes `outs` pointers at offset.
template <int kIn, int kOut, class X, class Body>
inline void over_vectors(int64_t n, const X* const (&in)[kIn], X* const (&out)[kOut], Body&& body) {
  constexpr int W = Simd::W;
  const int64_t full = n / W * W;
  for (int64_t i = 0; i < full; i += W) body(in, out, i);
  if (full == n) return;
  const int64_t rest = n - full;
  X pad_in[kIn][W] = {}, pad_out[kOut][W] = {};
  const X* pin[kIn];
  X* pout[kOut];
  for (int a = 0; a < kIn; ++a) {
    std::copy(in[a] + full, in[a] + n, pad_in[a]);
    pin[a] = pad_in[a];
  }
  for (int a = 0; a < kOut; ++a) pout[a] = pad_out[a];
  body(pin, pout, int64_t(0));
  for (int a = 0; a < kOut; ++a) std::copy(pad_out[a], pad_out[a] + rest, out[a] + full);
}

// h = silu(gate) * up = gate * sigmoid(gate) * up
template <class X>
inline void swiglu_forward_rows(X* h, const X* gate, const X* up, int64_t n) {
  const X* const in[2] = {gate, up};
  X* const out[1] = {h};
  over_vectors(n, in, out, [](const X* const* i, X* const* o, int64_t at) {
    const Simd::V g = load_values(i[0] + at);
    store_values(o[0] + at, Simd::mul(Simd::mul(g, sigmoid(g)), load_values(i[1] + at)));
  });
}

// From dh: dup = dh * silu(gate); dgate = dh * up * s * (1 + gate (1 - s)), s = sigmoid(gate)
template <class X>
inline void swiglu_backward_rows(X* dgate, X* dup, const X* dh, const X* gate, const X* up, int64_t n) {
  const X* const in[3] = {dh, gate, up};
  X* const out[2] = {dgate, dup};
  over_vectors(n, in, out, [](const X* const* i, X* const* o, int64_t at) {
    const Simd::V d = load_values(i[0] + at), g = load_values(i[1] + at), s = sigmoid(g);
    const Simd::V one = Simd::set1(1.0f);
    store_values(o[1] + at, Simd::mul(Simd::mul(d, g), s));
    const Simd::V slope = Simd::fma(g, Simd::sub(one, s), one);
    store_values(o[0] + at, Simd::mul(Simd::mul(Simd::mul(d, load_values(i[2] + at)), s), slope));
  });
}

inline void swiglu_forward(float* h, const float* gate, const float* up, int64_t n) {
  swiglu_forward_rows(h, gate, up, n);
}
inline void swiglu_forward_bf16(bf16* h, const bf16* gate, const bf16* up, int64_t n) {
  swiglu_forward_rows(h, gate, up, n);
}
inline void swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up,
                            int64_t n) {
  swiglu_backward_rows(dgate, dup, dh, gate, up, n);
}
inline void swiglu_backward_bf16(bf16* dgate, bf16* dup, const bf16* dh, const bf16* gate, const bf16* up,
                                 int64_t n) {
  swiglu_backward_rows(dgate, dup, dh, gate, up, n);
}

}  // namespace lct::LCT_ISA_NS
