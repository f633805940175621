// The avx512 kernel path: AVX-512 F/BW/VL/DQ, compiled with -march=x86-64-v4 only.
#define LCT_ISA_NS avx512
#define LCT_ISA_AVX512
#include "kernels/isa/simd.hpp"
#include "kernels/isa/shape.hpp"

#include "kernels/isa/flash_tiles.hpp"
#include "kernels/isa/probe.hpp"
#include "kernels/isa/softmax_rows.hpp"
#include "kernels/isa/swiglu_rows.hpp"

namespace lct {
const IsaKernels* isa_kernels_avx512() {
  using namespace avx512;
  static const IsaKernels k{Isa::Avx512, W, RT, NC, int(kPanel), Shape::PPAD, fma_probe, nullptr,
                            flash_fwd_tile, flash_bwd_tile, transpose_keys_f32, transpose_keys_bf16,
                            row_max, mask_row, exp_shift_sum, exp_shift_sum_bf16, probs_and_grads,
                            probs_and_grads_bf16, swiglu_forward, swiglu_forward_bf16,
                            swiglu_backward, swiglu_backward_bf16};
  return &k;
}
}  // namespace lct
