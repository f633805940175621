// The avx512_bf16 kernel path: the avx512 kernels plus bf16 tiles on AVX512_BF16 (vdpbf16ps),
// compiled with -march=x86-64-v4 -mavx512bf16 only.
#define LCT_ISA_NS avx512bf16
#define LCT_ISA_AVX512
#include "kernels/isa/simd.hpp"
#include "kernels/isa/shape.hpp"

#include "kernels/isa/flash_tiles.hpp"
#include "kernels/isa/flash_tiles_bf16.hpp"
#include "kernels/isa/probe.hpp"
#include "kernels/isa/softmax_rows.hpp"
#include "kernels/isa/swiglu_rows.hpp"

namespace lct::LCT_ISA_NS {

// 24 independent vdpbf16ps chains; each instruction is 32 multiply-adds (64 FLOPs). Twelve,
// enough for the FMA probe, left this one bound by vdpbf16ps's latency on Zen 5: one thread
// measured 404 GFLOP/s with 12 chains, 436-443 with 16 or 24 (2 per cycle, the same issue
// rate as the FMA's), so every bf16 %peak read ~8% high. 24 + 2 operands fit 32 registers.
double bf16_probe(int64_t iters) {
  constexpr int kChains = 24;
  __m512 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_ps(0.001f * float(j + 1));
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3400);
  for (int64_t i = 0; i < iters; ++i)
    LCT_UNROLL for (int j = 0; j < kChains; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
  volatile float sink = 0;
  for (int j = 0; j < kChains; ++j) sink = sink + _mm512_reduce_add_ps(acc[j]);
  return double(iters) * kChains * 64;
}

}  // namespace lct::LCT_ISA_NS

namespace lct {
const IsaKernels* isa_kernels_avx512bf16() {
  using namespace avx512bf16;
  static const IsaKernels k{Isa::Avx512Bf16, W, RT, NC, int(kPanel), Shape::PPAD, fma_probe, bf16_probe,
                            flash_fwd_tile, flash_bwd_tile, transpose_keys_f32, transpose_keys_bf16,
                            row_max, mask_row, exp_shift_sum, exp_shift_sum_bf16, probs_and_grads,
                            probs_and_grads_bf16, swiglu_forward, swiglu_forward_bf16, swiglu_backward,
                            swiglu_backward_bf16, flash_fwd_tile_bf16, flash_bwd_tile_bf16,
                            transpose_pairs_bf16, interleave_rows_bf16};
  return &k;
}
}  // namespace lct
