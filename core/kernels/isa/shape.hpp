// The tile shape of the including kernel path (LCT_ISA_AVX512, LCT_ISA_AVX2 or neither),
// after simd.hpp: query rows per strip R, vectors per key chunk NV, vectors of D per output
// pass DC, keys per dK/dV pass KC and vectors of D per dK/dV pass DB (flash_tiles.hpp), so
// that every micro-kernel's accumulators fit the ISA's registers; and the query rows per
// dK/dV pass PB, between the loads and stores of dK and dV; and PPAD, the floats added to the
// row stride of the backward tile's P and dS (FlashBwdTile::ldp). Declared once per ISA for
// the kernel paths' units and bench/tile_ab_variant.cpp.
#pragma once

#include "kernels/isa/kernels.hpp"

#ifndef LCT_ISA_NS
#error "shape.hpp is included only by the ISA translation units, which define LCT_ISA_NS"
#endif

namespace lct::LCT_ISA_NS {
#if defined(LCT_ISA_AVX512)
// 6 x 4 score vectors = 64 keys per chunk in 24 registers; p . v in 6 x 4 accumulators:
// each key or value vector loaded feeds 6 FMAs. 128-row query blocks end in two strips of 4.
// On a Zen 5 core, against strips of 4: tiles 7-10% faster, the whole attention 2-4%. (The
// bf16 tiles of avx512_bf16 take strips of 4: flash_tiles_bf16.hpp.)
struct Shape {
  static constexpr int R = 6, NV = 4, DC = 4, KC = 4, DB = 4, PB = 24, PPAD = 0;
};
#elif defined(LCT_ISA_AVX2)
// 6 x 2 score vectors = 16 keys per chunk, 12 of the 16 ymm registers; p . v in 6 x 2
// accumulators (measured 13% faster than 4 rows on 2 Zen 5 cores run as AVX2; 128-row query
// blocks end in two strips of 4); dK/dV in 4 keys x 3 vectors, enough independent chains to
// keep both FMA pipes busy. dK/dV passes of 48 query rows, not 24: the backward tile 2%
// faster on Zen 3 (32 KiB L1, where 24 rows' P, dS, q and dout did not fit either).
// P and dS rows of 128 + 16 floats: at 128 (512 bytes) a dK/dV pass's 48 rows of each fall in
// 8 of the L1's 64 sets, 12 lines a set against 8 ways; with one line more per row each of
// the 48 has a set of its own. The backward tile 1.002-1.059x on Zen 3 (14 in-process
// comparisons, median 1.017), the same bits; 8 and 32 floats gained less.
struct Shape {
  static constexpr int R = 6, NV = 2, DC = 2, KC = 4, DB = 3, PB = 48, PPAD = 16;
};
#else
struct Shape {
  static constexpr int R = 4, NV = 8, DC = 1, KC = 4, DB = 1, PB = 24, PPAD = 0;
};
#endif
static_assert(Shape::PPAD <= kMaxPPad, "the workspace plan bounds the padding by kMaxPPad");
}  // namespace lct::LCT_ISA_NS
