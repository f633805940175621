// One build of the attention tiles for bench/tile_ab.sh: the avx512_bf16 kernel path
// (TILE_AB_AVX512=1) or avx2 compiled inside its own namespace (TILE_AB_NS), so that two builds
// of the same headers (two revisions) link into one program. The tile interfaces
// (kernels/isa/kernels.hpp) are the working tree's for both.
#define LCT_ISA_NS TILE_AB_NS
#if TILE_AB_AVX512
#define LCT_ISA_AVX512
#else
#define LCT_ISA_AVX2
#endif
#include "kernels/isa/simd.hpp"
#include "kernels/isa/shape.hpp"  // the working tree's, for both revisions

#include "kernels/isa/flash_tiles.hpp"
#if TILE_AB_AVX512
#include "kernels/isa/flash_tiles_bf16.hpp"
#endif
#include "tile_ab.hpp"

namespace lct::tile_ab {
TileFns TILE_AB_FNS() {
  TileFns f;
  f.fwd = LCT_ISA_NS::flash_fwd_tile;
  f.bwd = LCT_ISA_NS::flash_bwd_tile;
  f.p_pad = LCT_ISA_NS::Shape::PPAD;
#if TILE_AB_AVX512
  f.fwd16 = LCT_ISA_NS::flash_fwd_tile_bf16;
  f.bwd16 = LCT_ISA_NS::flash_bwd_tile_bf16;
#endif
  return f;
}
}  // namespace lct::tile_ab
