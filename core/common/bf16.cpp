#include "common/bf16.hpp"

namespace lct {

// Plain loops over the inline conversions: the compiler vectorises the integer rounding.
void convert(const float* from, bf16* to, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) to[i] = to_bf16(from[i]);
}

void convert_rows(const float* from, int64_t rows, int64_t cols, bf16* to, int64_t ld) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = from + r * cols;
    bf16* y = to + r * ld;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) y[c] = to_bf16(x[c]);
  }
}

void convert(const bf16* from, float* to, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) to[i] = to_f32(from[i]);
}

}  // namespace lct
