#include "common/bf16.hpp"

namespace lct {

// Plain loops over the inline conversions: the compiler vectorises the integer rounding.
void convert(const float* from, bf16* to, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) to[i] = to_bf16(from[i]);
}

void convert(const bf16* from, float* to, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) to[i] = to_f32(from[i]);
}

}  // namespace lct
