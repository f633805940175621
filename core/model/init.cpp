#include "model/init.hpp"

#include "common/rng.hpp"

namespace lct {

void llama_init(const ParamLayout& layout, const ModelConfig& c, uint64_t seed, float* params) {
  for (size_t t = 0; t < layout.tensors.size(); ++t) {
    const TensorSpec& spec = layout.tensors[t];
    float* w = params + spec.offset;
    const int64_t n = int64_t(spec.numel);
    if (spec.kind == TensorKind::Norm) {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) w[i] = 1.0f;
    } else {
      const double std = c.initializer_range;
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) w[i] = float(std * normal_at(seed, t, uint64_t(i)));
    }
  }
}

}  // namespace lct
