// The multiply-add peak of one thread on this ISA: 12 independent accumulator chains (more
// than FMA latency x FMA pipes on any current core), so the loop is bound by FMA throughput.
#pragma once
#include <cstdint>

namespace lct::LCT_ISA_NS {

inline double fma_probe(int64_t iters) {
  constexpr int kChains = 12;
  Simd::V acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = Simd::set1(0.001f * float(j + 1));
  const Simd::V x = Simd::set1(0.999999f), y = Simd::set1(1e-7f);
  // Each chain depends on its previous value: without -ffast-math nothing can be skipped.
  for (int64_t i = 0; i < iters; ++i)
    LCT_UNROLL for (int j = 0; j < kChains; ++j) acc[j] = Simd::fma(acc[j], x, y);
  volatile float sink = 0;
  for (int j = 0; j < kChains; ++j) {
    alignas(64) float lanes[Simd::W];
    Simd::store(lanes, acc[j]);
    sink = sink + lanes[0];
  }
  return double(iters) * kChains * Simd::W * 2;
}

}  // namespace lct::LCT_ISA_NS
