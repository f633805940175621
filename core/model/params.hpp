// The parameter layout: every tensor of the model in one flat float array, named as in
// Hugging Face's Llama state dict. Gradients and optimiser moments use the same layout, so
// one offset table serves all of them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.hpp"

namespace lct {

enum class TensorKind { Embedding, Norm, Linear };

struct TensorSpec {
  std::string name;             // e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;   // [out, in] for linear layers, as in PyTorch
  TensorKind kind;
  size_t offset;                // in floats from the start of the flat array, 64-byte aligned
  size_t numel;
};

struct ParamLayout {
  std::vector<TensorSpec> tensors;
  size_t total = 0;  // floats, including alignment padding

  static ParamLayout llama(const ModelConfig& c);
  const TensorSpec* find(const std::string& name) const;
  size_t num_parameters() const;  // without padding
};

// Typed views into one flat array (parameters, gradients or a moment), shapes in comments.
struct LayerTensors {
  float* input_norm;  // [C]
  float* wq;          // [H*D, C]
  float* wk;          // [KV*D, C]
  float* wv;          // [KV*D, C]
  float* wo;          // [C, H*D]
  float* post_norm;   // [C]
  float* w_gate;      // [I, C]
  float* w_up;        // [I, C]
  float* w_down;      // [C, I]
};

struct ModelTensors {
  float* embed;       // [V, C]
  std::vector<LayerTensors> layers;
  float* final_norm;  // [C]
  float* lm_head;     // [V, C]; equals embed when the embeddings are tied
};

ModelTensors carve(const ParamLayout& layout, const ModelConfig& c, float* base);

}  // namespace lct
