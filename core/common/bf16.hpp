// bfloat16: the top 16 bits of an IEEE float (8 exponent bits, 7 mantissa bits), stored for
// matrix-product operands and saved activations; arithmetic is always done in fp32.
// Rounding float -> bf16 is to nearest, ties to even (as vcvtneps2bf16 and PyTorch do);
// NaN stays NaN.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace lct {

// What matrix products multiply: fp32, or bf16 operands with fp32 accumulation.
enum class Precision { Fp32, Bf16 };
inline const char* precision_name(Precision p) { return p == Precision::Bf16 ? "bf16" : "fp32"; }

struct bf16 {
  uint16_t bits = 0;
};
// Bytes of one element stored in `p` (K/V on the wire, activations).
inline size_t elem_size(Precision p) { return p == Precision::Bf16 ? sizeof(bf16) : sizeof(float); }

static_assert(sizeof(bf16) == 2);

inline bf16 to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {uint16_t((u >> 16) | 0x40u)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return {uint16_t(u >> 16)};
}

inline float to_f32(bf16 b) {
  const uint32_t u = uint32_t(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Overloads so templated kernels can load and store either type as fp32.
inline float load_f32(float x) { return x; }
inline float load_f32(bf16 x) { return to_f32(x); }
inline void store_as(float* p, float x) { *p = x; }
inline void store_as(bf16* p, float x) { *p = to_bf16(x); }

// A factor that multiplies bf16 values before a product, split into the power of two nearest
// it (`exact`: a bf16 times it rounds nothing, short of overflow) and what is left (`rest`,
// in [0.71, 1.42]), applied in fp32 to the product's result. Multiplying by the whole factor
// would round every value to bf16 a second time (2^-9 of each).
struct Bf16Scale {
  float exact, rest;
};
inline Bf16Scale bf16_scale(float factor) {
  const float exact = std::exp2(std::round(std::log2(factor)));
  return {exact, factor / exact};
}

// Bulk conversions over all OpenMP threads (static schedule); from == to is not allowed.
void convert(const float* from, bf16* to, int64_t n);
void convert(const bf16* from, float* to, int64_t n);
// from [rows, cols] into columns [0, cols) of to [rows, ld] (ld >= cols)
void convert_rows(const float* from, int64_t rows, int64_t cols, bf16* to, int64_t ld);
inline void convert(const float* from, float* to, int64_t n) { std::memcpy(to, from, size_t(n) * 4); }

}  // namespace lct
