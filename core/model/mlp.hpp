// The SwiGLU MLP of a Llama layer, y = down(silu(x W_gate^T) * (x W_up^T)), over sequence
// tiles. x [n, C] is the post-attention norm's output (kept for the backward pass), y [n, C]
// the MLP's output (fp32; with tensor parallelism a partial sum over I), I the SwiGLU width.
//
// Untiled (one tile of all n rows): the forward keeps gate and up [n, I] for the backward,
// and h, dgate, dup [n, I] are scratch. At long context these five [n, I] arrays are the
// largest thing a layer holds (I is 2.7-3.5x the hidden size).
// Tiled (ALST's tiled MLP): rows go `rows` at a time and nothing [n, I] exists: a tile's gate
// and up are made in [rows, I] scratch in the forward and made again in the backward, so
// the MLP's memory stays bounded by the tile whatever the sequence length. The price is those
// two products made again, 2/9 of the MLP's forward and backward work. The weight gradients
// are summed tile by tile, so a tiled run equals an untiled one to rounding, not bitwise.
#pragma once
#include <cstdint>

#include "common/clock.hpp"
#include "sys/isa.hpp"

namespace lct {

template <class X>
struct MlpWeights {
  const X *gate, *up;  // [I, C]
  const X* down;       // [C, I]
};
struct MlpGrads {
  float *gate, *up, *down;  // accumulated into
};

template <class X>
struct MlpBuffers {
  int64_t rows;   // rows per tile
  bool kept;      // gate and up are [n, I] arrays kept from the forward (untiled), else [rows, I] scratch
  X *gate, *up;
  X *h, *dgate, *dup;  // scratch [rows, I]
  Isa isa;             // the kernel path of SwiGLU's element-wise part
};

// y null: only what the backward reads (the recomputation of --checkpointing full): untiled,
// gate and up; tiled, nothing.
template <class X>
void mlp_forward(float* y, const X* x, const MlpWeights<X>& w, const MlpBuffers<X>& b, int64_t n,
                 int64_t C, int64_t I, PhaseClock& clock);

// dy [n, C] (the residual gradient as a product operand) -> dx [n, C], overwritten (with
// tensor parallelism a partial sum over I); the weights' gradients are added to g.
template <class X>
void mlp_backward(float* dx, const X* dy, const X* x, const MlpWeights<X>& w, const MlpGrads& g,
                  const MlpBuffers<X>& b, int64_t n, int64_t C, int64_t I, PhaseClock& clock);

}  // namespace lct
