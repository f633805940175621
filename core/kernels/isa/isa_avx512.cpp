// The avx512 kernel path: AVX-512 F/BW/VL/DQ, compiled with -march=x86-64-v4 only.
#define LCT_ISA_NS avx512
#define LCT_ISA_AVX512
#include "kernels/isa/simd.hpp"

namespace lct::LCT_ISA_NS {
// 6 x 4 score vectors = 6 query rows x 64 keys per chunk in 24 of the 32 registers; p . v
// in 6 x 4 accumulators. Six rows load each key or value vector for 6 FMAs instead of 4:
// on 1 Zen 5 core the fp32 forward tile went from 74% to 80% of the FMA peak and the
// backward from 81% to 84-86% (lct_tile_bench); query blocks of 128 become 132 rows.
struct Shape {
  static constexpr int R = 6, NV = 4, DC = 4, KC = 4, DB = 4;
};
}  // namespace lct::LCT_ISA_NS

#include "kernels/isa/flash_tiles.hpp"
#include "kernels/isa/probe.hpp"
#include "kernels/isa/softmax_rows.hpp"

namespace lct {
const IsaKernels* isa_kernels_avx512() {
  using namespace avx512;
  static const IsaKernels k{Isa::Avx512, W, R, NC, fma_probe, nullptr, flash_fwd_tile, flash_bwd_tile,
                            row_max, exp_shift_sum};
  return &k;
}
}  // namespace lct
