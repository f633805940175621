// The softmax's row pieces between two matrix products (the oneDNN tile path, whose products
// are oneDNN's): compiled once per ISA like the fused tiles, after simd.hpp.
#pragma once
#include <cmath>
#include <cstdint>

namespace lct::LCT_ISA_NS {

// max of x [n]; -inf when n is 0 or every x is -inf (a row that sees nothing yet).
inline float row_max(const float* x, int64_t n) {
  constexpr int W = Simd::W;
  int64_t i = 0;
  float m = -INFINITY;
  if (n >= W) {
    Simd::V acc = Simd::load(x);
    for (i = W; i + W <= n; i += W) acc = Simd::max(acc, Simd::load(x + i));
    m = Simd::reduce_max(acc);
  }
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// x [n] = e^(x - shift), as 2^((x - shift) log2 e): exactly 0 where x is -inf (masked);
// returns the sum. shift is finite.
inline float exp_shift_sum(float* x, int64_t n, float shift) {
  constexpr int W = Simd::W;
  constexpr float kLog2e = 1.44269504088896341f;
  const float base = -shift * kLog2e;
  const Simd::V scale = Simd::set1(kLog2e), offset = Simd::set1(base);
  Simd::V acc = Simd::zero();
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    const Simd::V p = Simd::exp2(Simd::fma(Simd::load(x + i), scale, offset));
    Simd::store(x + i, p);
    acc = Simd::add(acc, p);
  }
  float sum = Simd::reduce_add(acc);
  for (; i < n; ++i) sum += x[i] = std::exp2(x[i] * kLog2e + base);
  return sum;
}

}  // namespace lct::LCT_ISA_NS
