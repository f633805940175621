// The pair-product kernel (isa/pair_tiles.hpp) on the matrix engine: AMX tile loads, stores
// and TDPBF16PS. Compiled with the AMX instructions enabled; called only where
// amx_tiles_usable() holds.
#include <immintrin.h>

#include <cstdint>

#include "kernels/isa/pair_tiles.hpp"

namespace lct {

namespace {

// Palette 1: every tile 16 rows of 64 bytes. The tile configuration is a thread's state, and
// oneDNN's AMX kernels load their own between our calls: each call loads ours.
struct AmxTiles {
  struct alignas(64) Config {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
  } cfg;
  AmxTiles() {
    for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  }
  void configure() { _tile_loadconfig(&cfg); }
  void release() { _tile_release(); }
  // GCC's tile intrinsics paste the tile number into the instruction's text: a literal each.
#define LCT_TILE(T, ...)                               \
  if constexpr (T == 0) __VA_ARGS__(0);                \
  else if constexpr (T == 1) __VA_ARGS__(1);           \
  else if constexpr (T == 2) __VA_ARGS__(2);           \
  else if constexpr (T == 3) __VA_ARGS__(3);           \
  else if constexpr (T == 4) __VA_ARGS__(4);           \
  else if constexpr (T == 5) __VA_ARGS__(5);           \
  else if constexpr (T == 6) __VA_ARGS__(6);           \
  else __VA_ARGS__(7)
#define LCT_ZERO(t) _tile_zero(t)
#define LCT_LOAD(t) _tile_loadd(t, p, stride)
#define LCT_STORE(t) _tile_stored(t, p, stride)
  template <int T> void zero() { LCT_TILE(T, LCT_ZERO); }
  template <int T> void load(const void* p, int64_t stride) { LCT_TILE(T, LCT_LOAD); }
  template <int T> void store(void* p, int64_t stride) { LCT_TILE(T, LCT_STORE); }
  // The kernel's four products (pair_tiles.hpp): C tiles 0-3, A 4-5, B 6-7.
  template <int C, int A, int B> void dp() {
    static_assert((C == 0 && A == 4 && B == 6) || (C == 1 && A == 4 && B == 7) || (C == 2 && A == 5 && B == 6) ||
                  (C == 3 && A == 5 && B == 7));
    if constexpr (C == 0) _tile_dpbf16ps(0, 4, 6);
    else if constexpr (C == 1) _tile_dpbf16ps(1, 4, 7);
    else if constexpr (C == 2) _tile_dpbf16ps(2, 5, 6);
    else _tile_dpbf16ps(3, 5, 7);
  }
#undef LCT_STORE
#undef LCT_LOAD
#undef LCT_ZERO
#undef LCT_TILE
};
static_assert(sizeof(AmxTiles::Config) == 64);

}  // namespace

void pair_product_amx(const PairProduct& p) {
  AmxTiles e;
  pair_tiles::product(e, p);
}

}  // namespace lct
