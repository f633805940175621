// RoPE's inverse frequencies and cos/sin scale for a model, with Hugging Face's rope_scaling
// (transformers' modeling_rope_utils: _compute_default / _linear_scaling / _dynamic_ntk /
// _yarn / _llama3_parameters), computed in double.
#pragma once
#include <cstdint>
#include <vector>

#include "model/config.hpp"

namespace lct {

struct RopeFrequencies {
  std::vector<double> inv_freq;  // [head_dim / 2]: angle = position * inv_freq[i]
  double attention_factor = 1.0;  // multiplies cos and sin (yarn; 1 otherwise)
};

// `seq_len` is the sequence length the model runs at (ModelShape::max_pos, --seq-len). Only
// `dynamic` reads it: Hugging Face recomputes the base for seq_len = the longest position
// + 1 of each forward call when that exceeds max_position_embeddings; lctrain uses the run's
// sequence length, fixed for the run and the same on every rank (docs/context-extension.md).
RopeFrequencies rope_frequencies(const ModelConfig& c, int64_t seq_len);

}  // namespace lct
