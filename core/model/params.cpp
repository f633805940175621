#include "model/params.hpp"

#include "common/error.hpp"

namespace lct {

namespace {
constexpr size_t kAlignFloats = 16;  // 64 bytes: one cache line, one AVX-512 vector

std::string layer_name(int64_t l, const char* rest) { return cat("model.layers.", l, ".", rest); }
}  // namespace

ParamLayout ParamLayout::llama(const ModelConfig& c, int tp) {
  ParamLayout p;
  auto add = [&](std::string name, std::vector<int64_t> shape, TensorKind kind) {
    size_t n = 1;
    for (auto s : shape) n *= size_t(s);
    p.tensors.push_back({std::move(name), std::move(shape), kind, p.total, n});
    p.total += (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
  };
  // tp > 1: this rank's slices (tp.hpp); D is the whole model's head size either way.
  const int64_t C = c.hidden_size, D = c.head_dim(), I = c.intermediate_size / tp;
  const int64_t H = c.num_attention_heads / tp, KV = c.num_key_value_heads / tp, V = c.vocab_size / tp;
  add("model.embed_tokens.weight", {V, C}, TensorKind::Embedding);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    add(layer_name(l, "input_layernorm.weight"), {C}, TensorKind::Norm);
    add(layer_name(l, "self_attn.q_proj.weight"), {H * D, C}, TensorKind::Linear);
    add(layer_name(l, "self_attn.k_proj.weight"), {KV * D, C}, TensorKind::Linear);
    add(layer_name(l, "self_attn.v_proj.weight"), {KV * D, C}, TensorKind::Linear);
    add(layer_name(l, "self_attn.o_proj.weight"), {C, H * D}, TensorKind::Linear);
    add(layer_name(l, "post_attention_layernorm.weight"), {C}, TensorKind::Norm);
    add(layer_name(l, "mlp.gate_proj.weight"), {I, C}, TensorKind::Linear);
    add(layer_name(l, "mlp.up_proj.weight"), {I, C}, TensorKind::Linear);
    add(layer_name(l, "mlp.down_proj.weight"), {C, I}, TensorKind::Linear);
  }
  add("model.norm.weight", {C}, TensorKind::Norm);
  if (!c.tie_word_embeddings) add("lm_head.weight", {V, C}, TensorKind::Linear);
  return p;
}

const TensorSpec* ParamLayout::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<size_t> unit_bounds(const ParamLayout& layout, const ModelConfig& c) {
  // The layout's order (llama()): embedding, 9 tensors per layer, final norm, LM head.
  std::vector<size_t> b{0};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) b.push_back(layout.tensors.at(1 + 9 * size_t(l)).offset);
  b.push_back(layout.tensors.at(1 + 9 * size_t(c.num_hidden_layers)).offset);
  b.push_back(layout.total);
  return b;
}

size_t ParamLayout::num_parameters() const {
  size_t n = 0;
  for (const auto& t : tensors) n += t.numel;
  return n;
}

}  // namespace lct
