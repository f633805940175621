// The avx512 kernel path: AVX-512 F/BW/VL/DQ, compiled with -march=x86-64-v4 only.
#define LCT_ISA_NS avx512
#define LCT_ISA_AVX512
#include "kernels/isa/simd.hpp"

namespace lct::LCT_ISA_NS {
// 4 x 4 score vectors = 64 keys per chunk in 16 registers; p . v in 4 x 4 accumulators.
// Strips of 6 rows (24 registers, 128-row blocks ending in two strips of 4) measured the
// same as strips of 4 on a Zen 5 core, forward and backward, fp32 and end to end.
struct Shape {
  static constexpr int R = 4, NV = 4, DC = 4, KC = 4, DB = 4;
};
}  // namespace lct::LCT_ISA_NS

#include "kernels/isa/flash_tiles.hpp"
#include "kernels/isa/probe.hpp"
#include "kernels/isa/softmax_rows.hpp"

namespace lct {
const IsaKernels* isa_kernels_avx512() {
  using namespace avx512;
  static const IsaKernels k{Isa::Avx512, W, RT, NC, fma_probe, nullptr, flash_fwd_tile, flash_bwd_tile,
                            row_max, exp_shift_sum};
  return &k;
}
}  // namespace lct
