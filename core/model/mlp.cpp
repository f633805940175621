#include "model/mlp.hpp"

#include <algorithm>

#include "common/bf16.hpp"
#include "kernels/gemm.hpp"
#include "kernels/layers.hpp"

namespace lct {

namespace {

// A tile's gate and up [t, I]: where the forward kept them, or made now into scratch.
template <class X>
struct GateUp {
  X *gate, *up;
};

template <class X>
GateUp<X> gate_up(const X* x, const MlpWeights<X>& w, const MlpBuffers<X>& b, int64_t r0, int64_t t,
                  int64_t C, int64_t I, bool make, PhaseClock& clock) {
  const GateUp<X> g = b.kept ? GateUp<X>{b.gate + r0 * I, b.up + r0 * I} : GateUp<X>{b.gate, b.up};
  if (make) {
    linear_forward(g.gate, x + r0 * C, w.gate, t, C, I);
    linear_forward(g.up, x + r0 * C, w.up, t, C, I);
    clock.lap(Phase::Gemm);
  }
  return g;
}

}  // namespace

template <class X>
void mlp_forward(float* y, const X* x, const MlpWeights<X>& w, const MlpBuffers<X>& b, int64_t n,
                 int64_t C, int64_t I, PhaseClock& clock) {
  if (!y && !b.kept) return;  // the backward makes each tile's again
  for (int64_t r0 = 0; r0 < n; r0 += b.rows) {
    const int64_t t = std::min(b.rows, n - r0);
    const GateUp<X> g = gate_up(x, w, b, r0, t, C, I, true, clock);
    if (!y) continue;
    swiglu_forward(b.isa, b.h, g.gate, g.up, t * I);
    clock.lap(Phase::Other);
    linear_forward(y + r0 * C, b.h, w.down, t, I, C);
    clock.lap(Phase::Gemm);
  }
}

template <class X>
void mlp_backward(float* dx, const X* dy, const X* x, const MlpWeights<X>& w, const MlpGrads& g,
                  const MlpBuffers<X>& b, int64_t n, int64_t C, int64_t I, PhaseClock& clock) {
  for (int64_t r0 = 0; r0 < n; r0 += b.rows) {
    const int64_t t = std::min(b.rows, n - r0);
    const X* dy_t = dy + r0 * C;
    const X* x_t = x + r0 * C;
    const GateUp<X> gu = gate_up(x, w, b, r0, t, C, I, !b.kept, clock);
    swiglu_forward(b.isa, b.h, gu.gate, gu.up, t * I);  // made again: cheaper than keeping [n, I]
    clock.lap(Phase::Other);
    linear_backward_weight(g.down, dy_t, b.h, t, I, C);
    linear_backward_input(b.h, dy_t, w.down, t, I, C, false);  // h now holds dh
    clock.lap(Phase::Gemm);
    swiglu_backward(b.isa, b.dgate, b.dup, b.h, gu.gate, gu.up, t * I);
    clock.lap(Phase::Other);
    linear_backward_weight(g.gate, b.dgate, x_t, t, C, I);
    linear_backward_weight(g.up, b.dup, x_t, t, C, I);
    linear_backward_input(dx + r0 * C, b.dgate, w.gate, t, C, I, false);
    linear_backward_input(dx + r0 * C, b.dup, w.up, t, C, I, true);
    clock.lap(Phase::Gemm);
  }
}

template void mlp_forward<float>(float*, const float*, const MlpWeights<float>&, const MlpBuffers<float>&,
                                 int64_t, int64_t, int64_t, PhaseClock&);
template void mlp_forward<bf16>(float*, const bf16*, const MlpWeights<bf16>&, const MlpBuffers<bf16>&,
                                int64_t, int64_t, int64_t, PhaseClock&);
template void mlp_backward<float>(float*, const float*, const float*, const MlpWeights<float>&, const MlpGrads&,
                                  const MlpBuffers<float>&, int64_t, int64_t, int64_t, PhaseClock&);
template void mlp_backward<bf16>(float*, const bf16*, const bf16*, const MlpWeights<bf16>&, const MlpGrads&,
                                 const MlpBuffers<bf16>&, int64_t, int64_t, int64_t, PhaseClock&);

}  // namespace lct
