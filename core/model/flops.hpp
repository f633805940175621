// Model FLOPs of a step, the convention used for GFLOP/s and MFU (recomputation excluded):
//   matmuls: 2 per multiply-add of every linear weight (LM head included) per token in the
//            forward pass, twice that in the backward pass;
//   attention: FlashAttention-2 convention, 4 * D FLOPs per visible query-key pair and
//            query head in the forward pass (so a causal S x S block counts 4 S^2 D H / 2),
//            backward 2.5x the forward.
#pragma once
#include <cstdint>

#include "model/config.hpp"

namespace lct {

inline double matmul_params(const ModelConfig& c) {
  const double C = double(c.hidden_size), D = double(c.head_dim()), I = double(c.intermediate_size);
  const double H = double(c.num_attention_heads), KV = double(c.num_key_value_heads);
  const double per_layer = C * H * D * 2 + C * KV * D * 2 + 3 * C * I;
  return double(c.num_hidden_layers) * per_layer + double(c.vocab_size) * C;
}

struct Flops {
  double matmul = 0, attention = 0;
  double total() const { return matmul + attention; }
};

// tokens: all positions computed (padding too); pairs: visible query-key pairs per head.
inline Flops forward_flops(const ModelConfig& c, double tokens, double pairs) {
  return {2.0 * matmul_params(c) * tokens,
          4.0 * double(c.head_dim()) * double(c.num_attention_heads) *
              double(c.num_hidden_layers) * pairs};
}

inline Flops train_flops(const ModelConfig& c, double tokens, double pairs) {
  const Flops f = forward_flops(c, tokens, pairs);
  return {3.0 * f.matmul, 3.5 * f.attention};
}

}  // namespace lct
