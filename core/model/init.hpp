#pragma once
#include <cstdint>

#include "model/params.hpp"

namespace lct {

// Initialises parameters as Hugging Face's LlamaPreTrainedModel._init_weights does: every
// linear and embedding matrix ~ N(0, initializer_range^2), every RMSNorm weight = 1.
// Each tensor draws from its own counter-based stream (seed, tensor index), so the result is
// the same for any thread count. Written by the threads that will use it (first touch).
void llama_init(const ParamLayout& layout, const ModelConfig& c, uint64_t seed, float* params);

}  // namespace lct
