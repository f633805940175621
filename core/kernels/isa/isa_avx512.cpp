// The avx512 kernel path: AVX-512 F/BW/VL/DQ, compiled with -march=x86-64-v4 only.
#define LCT_ISA_NS avx512
#define LCT_ISA_AVX512
#include "kernels/isa/simd.hpp"

namespace lct::LCT_ISA_NS {
// 6 x 4 score vectors = 64 keys per chunk in 24 registers; p . v in 6 x 4 accumulators:
// each key or value vector loaded feeds 6 FMAs. 128-row query blocks end in two strips of 4.
// On a Zen 5 core, against strips of 4: tiles 7-10% faster, the whole attention 2-4%.
struct Shape {
  static constexpr int R = 6, NV = 4, DC = 4, KC = 4, DB = 4;
};
}  // namespace lct::LCT_ISA_NS

#include "kernels/isa/flash_tiles.hpp"
#include "kernels/isa/probe.hpp"
#include "kernels/isa/softmax_rows.hpp"
#include "kernels/isa/swiglu_rows.hpp"

namespace lct {
const IsaKernels* isa_kernels_avx512() {
  using namespace avx512;
  static const IsaKernels k{Isa::Avx512, W, RT, NC, int(kPanel), fma_probe, nullptr,
                            flash_fwd_tile, flash_bwd_tile,
                            row_max, mask_row, exp_shift_sum, exp_shift_sum_bf16, probs_and_grads,
                            probs_and_grads_bf16, swiglu_forward, swiglu_forward_bf16,
                            swiglu_backward, swiglu_backward_bf16};
  return &k;
}
}  // namespace lct
