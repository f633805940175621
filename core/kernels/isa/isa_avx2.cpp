// The avx2 kernel path: AVX2 + FMA, compiled with -march=x86-64-v3 only (16 ymm registers).
#define LCT_ISA_NS avx2
#define LCT_ISA_AVX2
#include "kernels/isa/simd.hpp"

namespace lct::LCT_ISA_NS {
// 6 x 2 score vectors = 16 keys per chunk, 12 of the 16 ymm registers; p . v in 6 x 2
// accumulators (measured 13% faster than 4 rows on 2 Zen 5 cores run as AVX2; 128-row query
// blocks end in two strips of 4); dK/dV in 4 keys x 3 vectors, enough independent chains to
// keep both FMA pipes busy.
struct Shape {
  static constexpr int R = 6, NV = 2, DC = 2, KC = 4, DB = 3;
};
}  // namespace lct::LCT_ISA_NS

#include "kernels/isa/flash_tiles.hpp"
#include "kernels/isa/probe.hpp"
#include "kernels/isa/softmax_rows.hpp"
#include "kernels/isa/swiglu_rows.hpp"

namespace lct {
const IsaKernels* isa_kernels_avx2() {
  using namespace avx2;
  static const IsaKernels k{Isa::Avx2, W, RT, NC, int(kPanel), fma_probe, nullptr,
                            flash_fwd_tile, flash_bwd_tile,
                            row_max, mask_row, exp_shift_sum, exp_shift_sum_bf16, probs_and_grads,
                            probs_and_grads_bf16, swiglu_forward, swiglu_forward_bf16,
                            swiglu_backward, swiglu_backward_bf16};
  return &k;
}
}  // namespace lct
