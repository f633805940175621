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

// A contiguous range [begin, end) of the flat parameter array: a rank's share of the
// optimizer state (ZeRO-1/2: one per rank) or its piece of one unit (ZeRO-3).
struct Shard {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};

struct ParamLayout {
  std::vector<TensorSpec> tensors;
  size_t total = 0;  // floats, including alignment padding

  // tp > 1: the shapes of one tensor-parallel rank's slices (model/tp.hpp), same names and order.
  static ParamLayout llama(const ModelConfig& c, int tp = 1);
  const TensorSpec* find(const std::string& name) const;
  size_t num_parameters() const;  // without padding
};

// Typed views into one flat array (parameters, gradients, a moment, or the bf16 copy of the
// parameters that matrix products read), shapes in comments.
template <class T>
struct LayerTensorsOf {
  T* input_norm;  // [C]
  T* wq;          // [H*D, C]
  T* wk;          // [KV*D, C]
  T* wv;          // [KV*D, C]
  T* wo;          // [C, H*D]
  T* post_norm;   // [C]
  T* w_gate;      // [I, C]
  T* w_up;        // [I, C]
  T* w_down;      // [C, I]
};

template <class T>
struct ModelTensorsOf {
  T* embed;       // [V, C]
  std::vector<LayerTensorsOf<T>> layers;
  T* final_norm;  // [C]
  T* lm_head;     // [V, C]; equals embed when the embeddings are tied
};
using LayerTensors = LayerTensorsOf<float>;
using ModelTensors = ModelTensorsOf<float>;

// The views of `layout` over an array of T starting at base.
template <class T>
ModelTensorsOf<T> carve(const ParamLayout& layout, const ModelConfig& c, T* base) {
  // The layout's order is fixed by llama(): walk it in the same order.
  size_t i = 0;
  auto next = [&]() { return base + layout.tensors.at(i++).offset; };
  ModelTensorsOf<T> m;
  m.embed = next();
  m.layers.resize(size_t(c.num_hidden_layers));
  for (auto& L : m.layers) {
    L.input_norm = next();
    L.wq = next();
    L.wk = next();
    L.wv = next();
    L.wo = next();
    L.post_norm = next();
    L.w_gate = next();
    L.w_up = next();
    L.w_down = next();
  }
  m.final_norm = next();
  m.lm_head = c.tie_word_embeddings ? m.embed : next();
  return m;
}

// ZeRO-3 gathers the parameters a unit at a time, each unit a contiguous range of the flat
// array: unit 0 the embedding, unit 1 + l layer l, unit L + 1 the head (final norm, and the
// LM head when untied). Returns the L + 3 boundaries.
std::vector<size_t> unit_bounds(const ParamLayout& layout, const ModelConfig& c);

// Layer l's views over `unit`, an array holding just that layer's range of the flat layout
// (unit_bounds()[1 + l] onwards), as a ZeRO-3 gather delivers it.
template <class T>
LayerTensorsOf<T> carve_layer(const ParamLayout& layout, int64_t l, T* unit) {
  const size_t first = 1 + 9 * size_t(l), base = layout.tensors.at(first).offset;
  auto at = [&](size_t k) { return unit + (layout.tensors.at(first + k).offset - base); };
  return {at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7), at(8)};
}

}  // namespace lct
