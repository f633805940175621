// The avx2 kernel path: AVX2 + FMA, compiled with -march=x86-64-v3 only (16 ymm registers).
#define LCT_ISA_NS avx2
#define LCT_ISA_AVX2
#include "kernels/isa/simd.hpp"

namespace lct::LCT_ISA_NS {
// 4 x 2 score vectors = 16 keys per chunk; p . v in 4 x 2 accumulators.
struct Shape {
  static constexpr int R = 4, NV = 2, DC = 2, KC = 4;
};
}  // namespace lct::LCT_ISA_NS

#include "kernels/isa/flash_tiles.hpp"
#include "kernels/isa/probe.hpp"

namespace lct {
const IsaKernels* isa_kernels_avx2() {
  using namespace avx2;
  static const IsaKernels k{Isa::Avx2, W, R, NC, fma_probe, nullptr, flash_fwd_tile, flash_bwd_tile};
  return &k;
}
}  // namespace lct
