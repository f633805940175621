// The pair-product kernel (pair_products.hpp) over a tile engine E: the matrix engine's
// instructions (isa/amx_tiles.cpp) or their emulation (pair_products.cpp). E provides
// configure(), release(), zero<T>(), load<T>(ptr, stride bytes), store<T>(ptr, stride bytes)
// and dp<C, A, B>() (C += A B on a 16 x 32 bf16 A and a 16-pair-row x 16 B, fp32 C), over
// tiles of 16 rows of 64 bytes numbered at compile time.
//
// Tiles: C 0..3 hold a 32 x 32 block of C (row half i, column half j in tile 2i + j), A 4 and
// 5 its two row halves of a 32-wide K chunk, B 6 and 7 its two column halves. Per K chunk, 4
// loads feed 4 products; edges take fewer tiles, and a C tile that crosses M or N, and A's
// last chunk when K is not a multiple of 32, go through small zero-padded copies.
// No std:: templates here: this header is compiled with the AMX instructions enabled in one
// file and without in another, and a shared instantiation could be taken from either.
#pragma once
#include <cstring>

#include "kernels/pair_products.hpp"

namespace lct::pair_tiles {
namespace {  // each including file has its own copy (see above)

inline int64_t at_most(int64_t a, int64_t b) { return a < b ? a : b; }

struct Edges {
  alignas(64) bf16 a[32 * 32];  // A's last K chunk [32 rows, 32]
  alignas(64) float c[16 * 16];  // one C tile that crosses M or N
};

// C tile T (rows m0.., columns n0..): loaded (accumulate) or zeroed.
template <int T, class E>
void c_begin(E& e, const PairProduct& p, int64_t m0, int64_t n0, Edges& x) {
  if (m0 >= p.M || n0 >= p.N) return;
  if (!p.accumulate) return e.template zero<T>();
  const int64_t rows = at_most(16, p.M - m0), cols = at_most(16, p.N - n0);
  float* c = p.c + m0 * p.ldc + n0;
  if (rows == 16 && cols == 16) return e.template load<T>(c, p.ldc * 4);
  std::memset(x.c, 0, sizeof x.c);
  for (int64_t i = 0; i < rows; ++i) std::memcpy(x.c + i * 16, c + i * p.ldc, size_t(cols) * sizeof(float));
  e.template load<T>(x.c, 64);
}

template <int T, class E>
void c_end(E& e, const PairProduct& p, int64_t m0, int64_t n0, Edges& x) {
  if (m0 >= p.M || n0 >= p.N) return;
  const int64_t rows = at_most(16, p.M - m0), cols = at_most(16, p.N - n0);
  float* c = p.c + m0 * p.ldc + n0;
  if (rows == 16 && cols == 16) return e.template store<T>(c, p.ldc * 4);
  e.template store<T>(x.c, 64);
  for (int64_t i = 0; i < rows; ++i) std::memcpy(c + i * p.ldc, x.c + i * 16, size_t(cols) * sizeof(float));
}

// The 32 x 32 block of C at (m0, n0): its K chunks of 32.
template <class E>
void block(E& e, const PairProduct& p, int64_t m0, int64_t n0, Edges& x) {
  const bool two_rows = p.M - m0 > 16, two_cols = p.N - n0 > 16;
  c_begin<0>(e, p, m0, n0, x);
  c_begin<1>(e, p, m0, n0 + 16, x);
  c_begin<2>(e, p, m0 + 16, n0, x);
  c_begin<3>(e, p, m0 + 16, n0 + 16, x);
  for (int64_t k0 = 0; k0 < p.K; k0 += 32) {
    const bf16* a = p.a + m0 * p.lda + k0;
    int64_t lda = p.lda;
    if (p.K - k0 < 32) {  // the last chunk: A's columns beyond K are not read, zeros instead
      const int64_t rows = at_most(32, p.M - m0), cols = p.K - k0;
      std::memset(static_cast<void*>(x.a), 0, sizeof x.a);
      for (int64_t i = 0; i < rows; ++i)
        std::memcpy(static_cast<void*>(x.a + i * 32), a + i * p.lda, size_t(cols) * sizeof(bf16));
      a = x.a;
      lda = 32;
    }
    const bf16* b = p.b + (k0 / 2) * p.ldb + 2 * n0;
    e.template load<4>(a, lda * 2);
    e.template load<6>(b, p.ldb * 2);
    e.template dp<0, 4, 6>();
    if (two_cols) {
      e.template load<7>(b + 32, p.ldb * 2);
      e.template dp<1, 4, 7>();
    }
    if (two_rows) {
      e.template load<5>(a + 16 * lda, lda * 2);
      e.template dp<2, 5, 6>();
      if (two_cols) e.template dp<3, 5, 7>();
    }
  }
  c_end<0>(e, p, m0, n0, x);
  c_end<1>(e, p, m0, n0 + 16, x);
  c_end<2>(e, p, m0 + 16, n0, x);
  c_end<3>(e, p, m0 + 16, n0 + 16, x);
}

template <class E>
void product(E& e, const PairProduct& p) {
  Edges x;
  e.configure();
  for (int64_t m0 = 0; m0 < p.M; m0 += 32)
    for (int64_t n0 = 0; n0 < p.N; n0 += 32) block(e, p, m0, n0, x);
  e.release();
}

}  // namespace
}  // namespace lct::pair_tiles
