// The tiles of one build, for bench/tile_ab.cpp (see bench/tile_ab.sh).
#pragma once
#include "kernels/isa/kernels.hpp"

namespace lct::tile_ab {
struct TileFns {
  void (*fwd)(const FlashFwdTile&) = nullptr;
  void (*bwd)(const FlashBwdTile&) = nullptr;
  void (*fwd16)(const FlashFwdTileBf16&) = nullptr;  // avx512_bf16 only
  void (*bwd16)(const FlashBwdTileBf16&) = nullptr;
  int p_pad = 0;  // the path's Shape::PPAD (the working tree's shape.hpp, both builds)
};
TileFns fns_a512();  // build A, avx512_bf16 path (its fp32 tiles are avx512's)
TileFns fns_b512();
TileFns fns_a2();    // build A, avx2 path
TileFns fns_b2();
}  // namespace lct::tile_ab
