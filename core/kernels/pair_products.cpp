#include "kernels/pair_products.hpp"

#include <algorithm>
#include <cstring>

#include "common/error.hpp"
#include "kernels/isa/kernels.hpp"
#include "kernels/isa/pair_tiles.hpp"
#include "sys/cpu.hpp"

namespace lct {

#if defined(LCT_X86_KERNELS)
void pair_product_amx(const PairProduct& p);  // isa/amx_tiles.cpp
#endif

namespace {

// The matrix engine's tiles in plain C++: 8 tiles of 16 rows of 64 bytes, TDPBF16PS's sum
// (each pair's two products added to C in turn, in fp32).
struct EmulatedTiles {
  alignas(64) unsigned char t[8][1024];
  void configure() {}
  void release() {}
  template <int T> void zero() { std::memset(t[T], 0, 1024); }
  template <int T> void load(const void* p, int64_t stride) {
    for (int r = 0; r < 16; ++r) std::memcpy(t[T] + 64 * r, static_cast<const char*>(p) + r * stride, 64);
  }
  template <int T> void store(void* p, int64_t stride) {
    for (int r = 0; r < 16; ++r) std::memcpy(static_cast<char*>(p) + r * stride, t[T] + 64 * r, 64);
  }
  template <int C, int A, int B> void dp() {
    float c[256];
    bf16 a[512], b[512];
    std::memcpy(c, t[C], sizeof c);
    std::memcpy(a, t[A], sizeof a);
    std::memcpy(b, t[B], sizeof b);
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) {
        float s = c[m * 16 + n];
        for (int k = 0; k < 16; ++k)
          s += to_f32(a[m * 32 + 2 * k]) * to_f32(b[k * 32 + 2 * n]) +
               to_f32(a[m * 32 + 2 * k + 1]) * to_f32(b[k * 32 + 2 * n + 1]);
        c[m * 16 + n] = s;
      }
    std::memcpy(t[C], c, sizeof c);
  }
};

}  // namespace

bool amx_tiles_usable() {
#if defined(LCT_X86_KERNELS)
  static const bool usable = detect_cpu().amx_bf16;
  return usable;
#else
  return false;
#endif
}

void pair_product(const PairProduct& p, PairEngine engine) {
  if (engine == PairEngine::Emulated) {
    EmulatedTiles e;
    return pair_tiles::product(e, p);
  }
#if defined(LCT_X86_KERNELS)
  if (amx_tiles_usable()) return pair_product_amx(p);
#endif
  fail("pair_product: this CPU or build has no AMX tiles");
}

void pair_rows(const bf16* x, int64_t R, int64_t C, int64_t ld, bf16* out, PairEngine engine) {
#if defined(LCT_X86_KERNELS)
  // every CPU with AMX has AVX512_BF16, and so the ISA's interleave
  if (engine == PairEngine::Amx && amx_tiles_usable())
    return isa_kernels(Isa::Avx512Bf16)->interleave_rows_bf16(x, ld, R, R + R % 2, C, out);
#endif
  interleave_rows(x, ld, R, R + R % 2, C, out);
}

void pair_product_reference(const PairProduct& p) {
  for (int64_t i = 0; i < p.M; ++i)
    for (int64_t j = 0; j < p.N; ++j) {
      float s = p.accumulate ? p.c[i * p.ldc + j] : 0.0f;
      for (int64_t k = 0; k < p.K; ++k) s += to_f32(p.a[i * p.lda + k]) * to_f32(p.b[(k / 2) * p.ldb + 2 * j + k % 2]);
      p.c[i * p.ldc + j] = s;
    }
}

// Plain copies (one conversion each at most) that the compiler vectorises.
void transpose_pairs(const bf16* x, int64_t ld, int64_t n, int64_t np, int64_t D, bf16* out, int64_t ldo) {
  for (int64_t i = 0; i < D / 2; ++i) {
    bf16* o = out + i * ldo;
    for (int64_t c = 0; c < n; ++c) std::memcpy(o + 2 * c, x + c * ld + 2 * i, 2 * sizeof(bf16));
    std::fill(o + 2 * n, o + 2 * np, bf16{});
  }
}

namespace {
inline bf16 as_bf16(float x) { return to_bf16(x); }
inline bf16 as_bf16(bf16 x) { return x; }
}  // namespace

template <class T>
void interleave_rows(const T* x, int64_t ld, int64_t n, int64_t np, int64_t D, bf16* out) {
  for (int64_t j = 0; 2 * j < np; ++j) {
    bf16* o = out + j * 2 * D;
    const T* a = x + 2 * j * ld;
    if (2 * j + 1 < n) {
      const T* b = a + ld;
      for (int64_t i = 0; i < D; ++i) {
        o[2 * i] = as_bf16(a[i]);
        o[2 * i + 1] = as_bf16(b[i]);
      }
    } else if (2 * j < n) {  // never read past the block: a missing second row is zero
      for (int64_t i = 0; i < D; ++i) {
        o[2 * i] = as_bf16(a[i]);
        o[2 * i + 1] = bf16{};
      }
    } else {
      std::fill(o, o + 2 * D, bf16{});
    }
  }
}
template void interleave_rows<float>(const float*, int64_t, int64_t, int64_t, int64_t, bf16*);
template void interleave_rows<bf16>(const bf16*, int64_t, int64_t, int64_t, int64_t, bf16*);

}  // namespace lct
