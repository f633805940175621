#include "model/llama.hpp"

#include <cstring>

#include "common/error.hpp"
#include "kernels/gemm.hpp"

namespace lct {

Checkpointing parse_checkpointing(const std::string& s) {
  if (s == "none") return Checkpointing::None;
  if (s == "attention") return Checkpointing::Attention;
  if (s == "full") return Checkpointing::Full;
  fail("unknown checkpointing policy '", s, "': use none, attention or full");
}

const char* to_string(Checkpointing c) {
  return c == Checkpointing::None ? "none" : c == Checkpointing::Attention ? "attention" : "full";
}

namespace {

LayerActs carve_layer(Carver& c, int64_t T, const ModelConfig& m, bool with_o) {
  const int64_t C = m.hidden_size, I = m.intermediate_size, HD = m.num_attention_heads * m.head_dim();
  const int64_t KVD = m.num_key_value_heads * m.head_dim();
  LayerActs a;
  a.ln1 = c.take(T * C);
  a.rstd1 = c.take(T);
  a.q = c.take(T * HD);
  a.k = c.take(T * KVD);
  a.v = c.take(T * KVD);
  a.o = with_o ? c.take(T * HD) : nullptr;
  a.lse = c.take(m.num_attention_heads * T);
  a.x_mid = c.take(T * C);
  a.ln2 = c.take(T * C);
  a.rstd2 = c.take(T);
  a.gate = c.take(T * I);
  a.up = c.take(T * I);
  return a;
}

// Layer inputs always; per-layer sets unless the whole layer is recomputed; the attention
// output per layer only with no checkpointing. Returns the floats needed.
size_t carve_activations(Carver c, const ModelConfig& config, const ModelShape& shape,
                         std::vector<float*>& x_in, std::vector<LayerActs>& stored, float*& lnf,
                         float*& rstdf) {
  const int64_t T = shape.max_tokens, C = config.hidden_size, L = config.num_hidden_layers;
  const int64_t HD = config.num_attention_heads * config.head_dim();
  x_in.assign(size_t(L + 1), nullptr);
  for (auto& x : x_in) x = c.take(T * C);
  stored.clear();
  const bool per_layer = shape.checkpointing != Checkpointing::Full;
  const bool keep_o = shape.checkpointing == Checkpointing::None;
  for (int64_t l = 0; l < (per_layer ? L : 1); ++l) stored.push_back(carve_layer(c, T, config, keep_o));
  if (!keep_o) {  // one shared attention output, recomputed per layer in backward
    float* o = c.take(T * HD);
    for (auto& a : stored) a.o = o;
  }
  lnf = c.take(T * C);
  rstdf = c.take(T);
  return c.used;
}

}  // namespace

size_t carve_scratch(Carver c, const ModelConfig& config, int64_t T, ScratchPointers& p) {
  const int64_t C = config.hidden_size, I = config.intermediate_size;
  const int64_t HD = config.num_attention_heads * config.head_dim();
  const int64_t KVD = config.num_key_value_heads * config.head_dim();
  p.dx = c.take(T * C);
  p.dln = c.take(T * C);
  p.tmp = c.take(T * C);
  p.h = c.take(T * I);
  p.dgate = c.take(T * I);
  p.dup = c.take(T * I);
  p.do_ = c.take(T * HD);
  p.dq = c.take(T * HD);
  p.dk = c.take(T * KVD);
  p.dv = c.take(T * KVD);
  return c.used;
}

LlamaModel::LlamaModel(const ModelConfig& config, const ModelShape& shape, AttentionOp* attention)
    : config_(config),
      shape_(shape),
      layout_(ParamLayout::llama(config)),
      params_(layout_.total),
      grads_(layout_.total),
      rope_(shape.max_pos, config.head_dim(), config.rope_theta),
      own_attention_(attention ? nullptr
                               : std::make_unique<LocalAttention>(
                                     shape.max_tokens, config.num_attention_heads,
                                     config.num_key_value_heads, config.head_dim(), shape.blocks,
                                     shape.isa)),
      attention_(attention ? attention : own_attention_.get()),
      xent_(shape.max_tokens, config.vocab_size) {
  w_ = carve(layout_, config_, params_.data());
  g_ = carve(layout_, config_, grads_.data());
  acts_ = Buffer<float>(carve_activations(Carver{nullptr}, config, shape, x_in_, stored_, lnf_, rstdf_));
  carve_activations(Carver{acts_.data()}, config, shape, x_in_, stored_, lnf_, rstdf_);
  scratch_ = Buffer<float>(carve_scratch(Carver{nullptr}, config, shape.max_tokens, sp_));
  carve_scratch(Carver{scratch_.data()}, config, shape.max_tokens, sp_);
}

ModelMemory LlamaModel::memory(const ModelConfig& config, const ModelShape& shape, int threads) {
  const size_t f = sizeof(float), params = ParamLayout::llama(config).total;
  std::vector<float*> x_in;
  std::vector<LayerActs> stored;
  float *lnf, *rstdf;
  ScratchPointers sp;
  ModelMemory m;
  m.params_grads = 2 * params * f;
  m.optimizer = 2 * params * f;
  m.activations = carve_activations(Carver{nullptr}, config, shape, x_in, stored, lnf, rstdf) * f;
  m.scratch = carve_scratch(Carver{nullptr}, config, shape.max_tokens, sp) * f +
              FlashAttention::workspace_bytes_for({shape.max_tokens, shape.max_tokens,
                                                   config.num_attention_heads,
                                                   config.num_key_value_heads, config.head_dim()},
                                                  shape.blocks, threads) +
              LmHeadXent::workspace_bytes_for(shape.max_tokens, config.vocab_size);
  return m;
}

void LlamaModel::zero_grads() {
  float* g = grads_.data();
  const int64_t n = int64_t(grads_.size());
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) g[i] = 0.0f;
}

LayerActs LlamaModel::layer_acts(int64_t l) {
  return shape_.checkpointing == Checkpointing::Full ? stored_[0] : stored_[size_t(l)];
}

void LlamaModel::attention_forward(const LayerActs& a, const Batch& b, PhaseClock& clock) {
  const int64_t n = T(b);
  const AttnDims d{n, n, config_.num_attention_heads, config_.num_key_value_heads, config_.head_dim()};
  const TokenTags tags{b.idx.data(), b.doc.data()};
  attention_->forward(d, a.q, a.k, a.v, tags, a.o, a.lse, clock);
}

void LlamaModel::layer_forward(int64_t l, const LayerActs& a, const float* x_in, float* x_out,
                               const Batch& b, PhaseClock& clock) {
  const LayerTensors& w = w_.layers[size_t(l)];
  const int64_t n = T(b), C = config_.hidden_size, I = config_.intermediate_size;
  const int64_t H = config_.num_attention_heads, KV = config_.num_key_value_heads;
  const int64_t D = config_.head_dim();
  const float eps = float(config_.rms_norm_eps);

  rmsnorm_forward(a.ln1, a.rstd1, x_in, w.input_norm, n, C, eps);
  clock.lap(Phase::Other);
  linear_forward(a.q, a.ln1, w.wq, n, C, H * D);
  linear_forward(a.k, a.ln1, w.wk, n, C, KV * D);
  linear_forward(a.v, a.ln1, w.wv, n, C, KV * D);
  clock.lap(Phase::Gemm);
  rope_.forward(a.q, b.pos.data(), n, H);
  rope_.forward(a.k, b.pos.data(), n, KV);
  clock.lap(Phase::Other);
  attention_forward(a, b, clock);
  linear_forward(sp_.tmp, a.o, w.wo, n, H * D, C);
  clock.lap(Phase::Gemm);
  add(a.x_mid, x_in, sp_.tmp, n * C);
  rmsnorm_forward(a.ln2, a.rstd2, a.x_mid, w.post_norm, n, C, eps);
  clock.lap(Phase::Other);
  linear_forward(a.gate, a.ln2, w.w_gate, n, C, I);
  linear_forward(a.up, a.ln2, w.w_up, n, C, I);
  clock.lap(Phase::Gemm);
  swiglu_forward(sp_.h, a.gate, a.up, n * I);
  clock.lap(Phase::Other);
  linear_forward(sp_.tmp, sp_.h, w.w_down, n, I, C);
  clock.lap(Phase::Gemm);
  add(x_out, a.x_mid, sp_.tmp, n * C);
  clock.lap(Phase::Other);
}

void LlamaModel::layer_backward(int64_t l, const LayerActs& a, const float* x_in, float* dx,
                                const Batch& b, PhaseClock& clock) {
  // dx [T, C] arrives as d(loss)/d(layer output) and leaves as d(loss)/d(layer input).
  const LayerTensors& w = w_.layers[size_t(l)];
  LayerTensors& g = g_.layers[size_t(l)];
  const int64_t n = T(b), C = config_.hidden_size, I = config_.intermediate_size;
  const int64_t H = config_.num_attention_heads, KV = config_.num_key_value_heads;
  const int64_t D = config_.head_dim();

  // MLP: x_out = x_mid + down(silu(gate) * up)
  swiglu_forward(sp_.h, a.gate, a.up, n * I);  // recomputed: cheaper than storing [T, I]
  clock.lap(Phase::Other);
  linear_backward_weight(g.w_down, dx, sp_.h, n, I, C);
  linear_backward_input(sp_.h, dx, w.w_down, n, I, C, false);  // h now holds dh
  clock.lap(Phase::Gemm);
  swiglu_backward(sp_.dgate, sp_.dup, sp_.h, a.gate, a.up, n * I);
  clock.lap(Phase::Other);
  linear_backward_weight(g.w_gate, sp_.dgate, a.ln2, n, C, I);
  linear_backward_weight(g.w_up, sp_.dup, a.ln2, n, C, I);
  linear_backward_input(sp_.dln, sp_.dgate, w.w_gate, n, C, I, false);
  linear_backward_input(sp_.dln, sp_.dup, w.w_up, n, C, I, true);
  clock.lap(Phase::Gemm);
  rmsnorm_backward(dx, g.post_norm, sp_.dln, a.x_mid, a.rstd2, w.post_norm, n, C, true);
  clock.lap(Phase::Other);

  // Attention: x_mid = x_in + o_proj(attn(rope(q), rope(k), v))
  if (shape_.checkpointing == Checkpointing::Attention) attention_forward(a, b, clock);
  linear_backward_weight(g.wo, dx, a.o, n, H * D, C);
  linear_backward_input(sp_.do_, dx, w.wo, n, H * D, C, false);
  clock.lap(Phase::Gemm);
  std::memset(sp_.dq, 0, size_t(n * H * D) * sizeof(float));
  std::memset(sp_.dk, 0, size_t(n * KV * D) * sizeof(float));
  std::memset(sp_.dv, 0, size_t(n * KV * D) * sizeof(float));
  const AttnDims d{n, n, H, KV, D};
  const TokenTags tags{b.idx.data(), b.doc.data()};
  attention_->backward(d, a.q, a.k, a.v, a.o, a.lse, sp_.do_, tags, sp_.dq, sp_.dk, sp_.dv, clock);
  rope_.backward(sp_.dq, b.pos.data(), n, H);
  rope_.backward(sp_.dk, b.pos.data(), n, KV);
  clock.lap(Phase::Other);
  linear_backward_weight(g.wq, sp_.dq, a.ln1, n, C, H * D);
  linear_backward_weight(g.wk, sp_.dk, a.ln1, n, C, KV * D);
  linear_backward_weight(g.wv, sp_.dv, a.ln1, n, C, KV * D);
  linear_backward_input(sp_.dln, sp_.dq, w.wq, n, C, H * D, false);
  linear_backward_input(sp_.dln, sp_.dk, w.wk, n, C, KV * D, true);
  linear_backward_input(sp_.dln, sp_.dv, w.wv, n, C, KV * D, true);
  clock.lap(Phase::Gemm);
  rmsnorm_backward(dx, g.input_norm, sp_.dln, x_in, a.rstd1, w.input_norm, n, C, true);
  clock.lap(Phase::Other);
}

void LlamaModel::embed_and_layers_forward(const Batch& b, PhaseClock& clock) {
  const int64_t n = T(b), C = config_.hidden_size;
  if (n > shape_.max_tokens) fail("micro-batch of ", n, " tokens exceeds the model's ", shape_.max_tokens);
  embedding_forward(x_in_[0], b.tokens.data(), w_.embed, n, C);
  clock.lap(Phase::Other);
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l)
    layer_forward(l, layer_acts(l), x_in_[size_t(l)], x_in_[size_t(l + 1)], b, clock);
  rmsnorm_forward(lnf_, rstdf_, x_in_.back(), w_.final_norm, n, C, float(config_.rms_norm_eps));
  clock.lap(Phase::Other);
}

double LlamaModel::forward(const Batch& b, PhaseClock& clock, int32_t* argmax) {
  embed_and_layers_forward(b, clock);
  const double loss = xent_.run(lnf_, w_.lm_head, b.targets.data(), T(b), config_.hidden_size,
                                0.0f, nullptr, nullptr, argmax);
  clock.lap(Phase::Gemm);
  return loss;
}

double LlamaModel::forward_backward(const Batch& b, float grad_scale, PhaseClock& clock) {
  const int64_t n = T(b), C = config_.hidden_size;
  embed_and_layers_forward(b, clock);
  // The loss gradient needs nothing downstream: LM head forward and backward in one pass.
  const double loss = xent_.run(lnf_, w_.lm_head, b.targets.data(), n, C, grad_scale, sp_.dln,
                                g_.lm_head);
  clock.lap(Phase::Gemm);
  rmsnorm_backward(sp_.dx, g_.final_norm, sp_.dln, x_in_.back(), rstdf_, w_.final_norm, n, C, false);
  clock.lap(Phase::Other);
  for (int64_t l = config_.num_hidden_layers - 1; l >= 0; --l) {
    const LayerActs a = layer_acts(l);
    if (shape_.checkpointing == Checkpointing::Full)  // rebuild this layer's activations
      layer_forward(l, a, x_in_[size_t(l)], sp_.tmp, b, clock);
    layer_backward(l, a, x_in_[size_t(l)], sp_.dx, b, clock);
  }
  embedding_backward(g_.embed, b.tokens.data(), sp_.dx, n, C);
  clock.lap(Phase::Other);
  return loss;
}

}  // namespace lct
