#include "model/llama.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "common/error.hpp"
#include "common/knobs.hpp"
#include "common/progress_mark.hpp"
#include "kernels/gemm.hpp"
#include "model/activation_offload.hpp"
#include "model/mlp.hpp"
#include "model/rope.hpp"
#include "model/tp_exchange.hpp"

namespace lct {

namespace {

// Consecutive 64-byte aligned pieces of one allocation; counts bytes when base is null.
struct Carver {
  char* base;
  size_t used = 0;
  template <class T>
  T* take(int64_t n) {
    T* p = base ? reinterpret_cast<T*>(base + used) : nullptr;
    used += (size_t(n) * sizeof(T) + 63) / 64 * 64;
    return p;
  }
  void align(size_t a) { used = (used + a - 1) / a * a; }
};

// The sizes one rank computes with: the whole model's, or its tensor-parallel slices (tp.hpp:
// H, KV and I are this rank's heads, KV heads and SwiGLU width).
// sd: the ranks the residual stream's tokens are split over (sequence parallelism), else 1.
struct Dims {
  int64_t C, I, H, KV, D, L, sd;
  Dims(const ModelConfig& c, const TpDims& t, int64_t seq_ranks)
      : C(c.hidden_size), I(t.I), H(t.H), KV(t.KV), D(c.head_dim()), L(c.num_hidden_layers), sd(seq_ranks) {}
};

// Activations of one layer, [T, ...] each (X = the activation type); Tr = T / sd: this
// rank's rows of the residual stream (all T without sequence parallelism).
template <class X>
struct LayerActs {
  X* ln1;         // [T, C]   input_layernorm output (sequence-parallel: gathered)
  float* rstd1;   // [Tr]
  X* q;           // [T, H*D] after RoPE
  X* k;           // [T, KV*D] after RoPE
  X* v;           // [T, KV*D]
  X* o;           // [T, H*D] attention output
  float* lse;     // [H, T]
  float* x_mid;   // [Tr, C]  residual after attention
  X* ln2;         // [T, C]
  float* rstd2;   // [Tr]
  X* gate;        // [T, I] (null with a tiled MLP: made again per tile, mlp.hpp)
  X* up;          // [T, I]
};

template <class X>
LayerActs<X> carve_layer(Carver& c, int64_t T, const Dims& m, bool with_o, bool with_mlp) {
  const int64_t C = m.C, I = m.I, HD = m.H * m.D, KVD = m.KV * m.D, Tr = T / m.sd;
  LayerActs<X> a;
  a.ln1 = c.take<X>(T * C);
  a.rstd1 = c.take<float>(Tr);
  a.q = c.take<X>(T * HD);
  a.k = c.take<X>(T * KVD);
  a.v = c.take<X>(T * KVD);
  a.o = with_o ? c.take<X>(T * HD) : nullptr;
  a.lse = c.take<float>(m.H * T);
  a.x_mid = c.take<float>(Tr * C);
  a.ln2 = c.take<X>(T * C);
  a.rstd2 = c.take<float>(Tr);
  a.gate = with_mlp ? c.take<X>(T * I) : nullptr;
  a.up = with_mlp ? c.take<X>(T * I) : nullptr;
  return a;
}

// The layers whose sets go to the shape's tier (activation_offload.hpp); 0 without one.
int64_t moved_sets(int64_t layers, const ModelShape& shape) {
  return ActivationOffload::moved(layers, shape.offload_activations.on(), shape.offload_layers);
}

// What the forward pass keeps, as one set per layer (activation_offload.hpp): its input
// (fp32: the residual stream) and, unless the whole layer is recomputed, what its forward
// made, the attention output only with no checkpointing (else one shared, recomputed per
// layer in backward). Each set is contiguous, in a slot of its own or, with a tier, in one of
// a few slots it shares with other layers' sets.
template <class X>
struct Activations {
  std::vector<float*> x_in;          // [slots] the slot's layer input [Tr, C]
  std::vector<LayerActs<X>> stored;  // [slots], or one shared set when recomputed
  std::vector<char*> slot_base;      // [slots] where each slot's set starts
  size_t set_bytes = 0;
  float* x_final = nullptr;          // [Tr, C] the last layer's output, the final norm's input
  X* lnf = nullptr;                  // [T, C] final norm output (sequence-parallel: gathered)
  float* rstdf = nullptr;            // [Tr]
};

template <class X>
size_t carve_activations(Carver c, const Dims& config, const ModelShape& shape, Activations<X>& a) {
  const int64_t T = shape.max_tokens, C = config.C, L = config.L, HD = config.H * config.D;
  const int64_t Tr = T / config.sd;
  const bool per_layer = shape.checkpointing != Checkpointing::Full;
  const bool keep_o = shape.checkpointing == Checkpointing::None;
  a.x_in.clear();
  a.stored.clear();
  a.slot_base.clear();
  // With a tier, sets start and end on TierStore::kAlign for direct I/O.
  const bool tier = shape.offload_activations.on();
  const int64_t moved = moved_sets(L, shape);
  for (int64_t s = 0; s < ActivationOffload::slots(L, moved); ++s) {
    if (tier) c.align(TierStore::kAlign);
    const size_t start = c.used;
    a.slot_base.push_back(c.base ? c.base + start : nullptr);
    a.x_in.push_back(c.take<float>(Tr * C));
    if (per_layer) a.stored.push_back(carve_layer<X>(c, T, config, keep_o, !shape.mlp_tiled()));
    if (tier) c.align(TierStore::kAlign);
    a.set_bytes = c.used - start;
  }
  a.x_final = c.take<float>(Tr * C);
  if (!per_layer) a.stored.push_back(carve_layer<X>(c, T, config, keep_o, !shape.mlp_tiled()));
  if (!keep_o) {
    X* o = c.take<X>(T * HD);
    for (auto& s : a.stored) s.o = o;
  }
  a.lnf = c.take<X>(T * C);
  a.rstdf = c.take<float>(Tr);
  return c.used;
}

// Backward scratch, one set shared by all layers. With X = float the operand copies are the
// fp32 buffers themselves (nothing to convert).
template <class X>
struct Scratch {
  float *dx, *dln, *tmp;  // [T, C] residual gradient ([Tr, C] used), norm-input gradient, a product's output
  X* dy;                  // [T, C] the residual gradient as a product operand
  X* h;                   // [R, I] swiglu output, then its gradient (R: the MLP's rows per tile)
  X *dgate, *dup;         // [R, I]
  X *gate, *up;           // [R, I] a tiled MLP's (else kept with the layer's activations)
  X* do_;                 // [T, H*D] attention output gradient
  float* o32;             // [T, H*D] bf16: q before RoPE, then the kernel's fp32 attention output
  float *dq, *dk, *dv;    // [T, H*D], [T, KV*D] (dk also holds k before RoPE in forward)
  X *dqx, *dkx, *dvx;     // the same as product operands
  X* dqkvx;               // bf16: [T, (H+2KV)*D], dq | dk | dv of each row side by side (one
                          // region with dqx, dkx and dvx: a step uses one layout or the other)
};

template <class X>
size_t carve_scratch(Carver c, const Dims& config, const ModelShape& shape, Scratch<X>& p) {
  constexpr bool b16 = std::is_same_v<X, bf16>;
  const int64_t C = config.C, I = config.I, HD = config.H * config.D, KVD = config.KV * config.D;
  const int64_t T = shape.max_tokens, R = shape.mlp_rows();
  p.dx = c.take<float>(T * C);
  p.dln = c.take<float>(T * C);
  p.tmp = c.take<float>(T * C);
  p.h = c.take<X>(R * I);
  p.dgate = c.take<X>(R * I);
  p.dup = c.take<X>(R * I);
  p.gate = shape.mlp_tiled() ? c.take<X>(R * I) : nullptr;
  p.up = shape.mlp_tiled() ? c.take<X>(R * I) : nullptr;
  p.do_ = c.take<X>(T * HD);
  p.dq = c.take<float>(T * HD);
  p.dk = c.take<float>(T * KVD);
  p.dv = c.take<float>(T * KVD);
  if constexpr (b16) {
    p.dy = c.take<X>(T * C);
    p.o32 = c.take<float>(T * HD);
    p.dqkvx = c.take<X>(T * (HD + 2 * KVD));
    p.dqx = p.dqkvx;
    p.dkx = p.dqx + T * HD;
    p.dvx = p.dkx + T * KVD;
  } else {
    p.dqkvx = nullptr;
    p.dy = p.dx;
    p.o32 = nullptr;
    p.dqx = p.dq;
    p.dkx = p.dk;
    p.dvx = p.dv;
  }
  return c.used;
}

// x as a product operand: itself for fp32, else rounded into buf.
template <class X>
const X* as_operand(float* x, X* buf, int64_t n) {
  if constexpr (std::is_same_v<X, float>) return x;
  else {
    convert(x, buf, n);
    return buf;
  }
}

}  // namespace

class LlamaPasses {
 public:
  virtual ~LlamaPasses() = default;
  virtual double forward_backward(const Batch& b, float grad_scale, PhaseClock& clock) = 0;
  virtual double forward(const Batch& b, PhaseClock& clock, int32_t* argmax, float* token_loss) = 0;
};

template <class X>
class LlamaPassesOf final : public LlamaPasses {
 public:
  explicit LlamaPassesOf(LlamaModel& m)
      : m_(m),
        sp_ranks_(m.tp_ && m.shape_.sequence_parallel ? m.split_.size : 1),
        dims_(m.config_, m.dims_, sp_ranks_),
        tpx_(m.tp_, sp_ranks_ > 1, m.config_.hidden_size),
        xent_(m.shape_.max_tokens, m.dims_.V, m.shape_.precision, {}, m.tp_, m.dims_.v0,
              sp_ranks_ == 1),
        units_(m.shards_, m.layout_, m.config_, m.master(), m.grads_.data()) {
    if constexpr (std::is_same_v<X, bf16>) {
      if (m.shards_) fail(knob_name(Knob::Zero), " 3 trains in fp32 only: use ", knob_name(Knob::Precision), " fp32, or ", knob_name(Knob::Zero), " 2 with bf16");
      wcopy_ = Buffer<bf16>(m.layout_.total);
      wx_ = carve(m.layout_, m.config_, wcopy_.data());
    }
    acts_buf_ = Buffer<char>(carve_activations(Carver{nullptr}, dims_, m.shape_, acts_),
                             m.shape_.offload_activations.on() ? TierStore::kAlign : 64);
    carve_activations(Carver{acts_buf_.data()}, dims_, m.shape_, acts_);
    const int64_t moved = moved_sets(m.config_.num_hidden_layers, m.shape_);
    offload_ = std::make_unique<ActivationOffload>(
        moved ? std::make_unique<TierStore>(m.shape_.offload_activations, acts_.set_bytes, moved, "--offload-activations")
              : nullptr,
        moved, acts_.slot_base, acts_.set_bytes);
    scratch_buf_ = Buffer<char>(carve_scratch(Carver{nullptr}, dims_, m.shape_, sp_));
    carve_scratch(Carver{scratch_buf_.data()}, dims_, m.shape_, sp_);
  }

  double forward(const Batch& b, PhaseClock& clock, int32_t* argmax, float* token_loss) override {
    embed_and_layers_forward(b, false, clock);
    const HeadWeights h = head_weights(-1, false, clock);
    final_norm_forward(h, b, clock);
    const double loss = xent_.run(acts_.lnf, h.lm_head, b.targets.data(), T(b),
                                  m_.config_.hidden_size, 0.0f, nullptr, nullptr, argmax, token_loss,
                                  weights_of(b));
    clock.lap(Phase::Gemm);
    head_done(false, clock);
    return loss;
  }

  double forward_backward(const Batch& b, float grad_scale, PhaseClock& clock) override {
    const int64_t n = T(b), C = m_.config_.hidden_size, L = m_.config_.num_hidden_layers;
    const int64_t nr = tpx_.rows(n);  // this rank's rows of the residual stream
    tpx_.norm_grads_begin(norm_grads());
    embed_and_layers_forward(b, true, clock);
    const HeadWeights h = head_weights(int(L), true, clock);  // ZeRO-3: fetch the last layer again
    final_norm_forward(h, b, clock);
    // The loss gradient needs nothing downstream: LM head forward and backward in one pass.
    const double loss = xent_.run(acts_.lnf, h.lm_head, b.targets.data(), n, C, grad_scale,
                                  sp_.dln, h.g_lm_head, nullptr, nullptr, weights_of(b));
    clock.lap(Phase::Gemm);
    if (tpx_.sequence_parallel()) tpx_.sum(sp_.dln, n, clock);  // (else summed by the LM head)
    rmsnorm_backward(sp_.dx, h.g_final_norm, sp_.dln, acts_.x_final, acts_.rstdf, h.final_norm,
                     nr, C, false);
    clock.lap(Phase::Other);
    head_done(true, clock);
    for (int64_t l = L - 1; l >= 0; --l) {
      offload_->before_backward(l);
      lap_offload(clock);
      const LayerActs<X> a = layer_acts(l);
      const LayerWeights lw = layer_weights(l, l > 0 ? int(l) : -1, true, clock);
      if (m_.shape_.checkpointing == Checkpointing::Full)  // rebuild this layer's activations
        layer_forward(lw, a, x_in(l), nullptr, b, clock);
      layer_backward(lw, a, x_in(l), sp_.dx, b, clock);
      layer_done(l, true, clock);
      progress_mark("backward, layer", L - l, L);
    }
    // (tp: this rank's vocabulary rows, from every token's gradient)
    embedding_backward(units_.grads(0), b.tokens.data(), tpx_.whole_rows(sp_.dx, sp_.tmp, n, clock), n, C,
                       m_.dims_.v0, m_.dims_.V);
    clock.lap(Phase::Other);
    tpx_.norm_grads_end(norm_grads(), clock);
    units_.grads_done(0);
    units_.lap(clock);
    return loss;
  }

 private:
  int64_t T(const Batch& b) const { return b.tokens_total(); }

  // The norm weights' gradients (sequence parallelism sums them over the tp group).
  std::vector<float*> norm_grads() {
    if (!tpx_.sequence_parallel()) return {};
    std::vector<float*> g{m_.g_.final_norm};
    for (const LayerTensors& l : m_.g_.layers) g.insert(g.end(), {l.input_norm, l.post_norm});
    return g;
  }
  int head_unit() const { return int(m_.config_.num_hidden_layers) + 1; }

  // A layer's weights: fp32 (norms; every product in fp32), what products read, and where
  // its parameter gradients go.
  struct LayerWeights {
    LayerTensors w;
    LayerTensorsOf<X> wx;
    LayerTensors g;
  };

  // What the products read of a layer and of the LM head: bf16, the rounded copy of the
  // (whole) master; fp32, the master as the unit delivered it.
  LayerTensorsOf<X> products_read(int64_t l, const LayerTensors& w) const {
    if constexpr (std::is_same_v<X, bf16>) return wx_.layers[size_t(l)];
    else return w;
  }
  const X* products_read_head(const float* lm_head) const {
    if constexpr (std::is_same_v<X, bf16>) return wx_.lm_head;
    else return lm_head;
  }

  // Layer l's weights (unit l + 1; ZeRO-3: gathered, with the gather of unit `next` started
  // behind it) and, `grads`, where its gradients go; layer_done() gives both back.
  LayerWeights layer_weights(int64_t l, int next, bool grads, PhaseClock& clock) {
    const int u = int(l) + 1;
    LayerWeights lw;
    lw.w = carve_layer(m_.layout_, l, units_.acquire(u, next));
    lw.wx = products_read(l, lw.w);
    lw.g = grads ? carve_layer(m_.layout_, l, units_.grads(u)) : LayerTensors{};
    units_.lap(clock);
    return lw;
  }

  void layer_done(int64_t l, bool grads, PhaseClock& clock) {
    units_.release(int(l) + 1);
    if (grads) units_.grads_done(int(l) + 1);  // ZeRO-3: reduce-scattered as soon as the layer is done
    units_.lap(clock);
  }

  // The final norm and the LM head (and their gradients, `grads`), as layer_weights().
  // Tied embeddings: the LM head is unit 0, acquired again (and its gradients are kept until
  // the embedding's backward has added to them).
  struct HeadWeights {
    float* final_norm;
    const X* lm_head;
    float *g_final_norm, *g_lm_head;
  };

  HeadWeights head_weights(int next, bool grads, PhaseClock& clock) {
    const ParamLayout& lay = m_.layout_;
    const bool tied = m_.config_.tie_word_embeddings;
    const size_t norm_at = lay.tensors.at(1 + 9 * size_t(m_.config_.num_hidden_layers)).offset;
    const size_t head_off = tied ? 0 : lay.tensors.back().offset - norm_at;  // within its unit
    float* p = units_.acquire(head_unit(), next);
    HeadWeights h{p, products_read_head(tied ? units_.acquire(0, -1) : p + head_off), nullptr, nullptr};
    if (grads) {
      float* g = units_.grads(head_unit());
      h.g_final_norm = g;
      h.g_lm_head = tied ? units_.grads(0) : g + head_off;
    }
    units_.lap(clock);
    return h;
  }

  void head_done(bool grads, PhaseClock& clock) {
    units_.release(head_unit());
    if (m_.config_.tie_word_embeddings) units_.release(0);
    if (grads) units_.grads_done(head_unit());  // tied: unit 0's after the embedding's backward
    units_.lap(clock);
  }

  void final_norm_forward(const HeadWeights& h, const Batch& b, PhaseClock& clock) {
    const int64_t n = T(b), C = m_.config_.hidden_size;
    rmsnorm_forward(acts_.lnf + tpx_.first_row(n) * C, acts_.rstdf, acts_.x_final, h.final_norm,
                    tpx_.rows(n), C, float(m_.config_.rms_norm_eps));
    clock.lap(Phase::Other);
    tpx_.gather(acts_.lnf, n, clock);
  }
  LayerActs<X> layer_acts(int64_t l) {
    return m_.shape_.checkpointing == Checkpointing::Full ? acts_.stored[0] : acts_.stored[size_t(offload_->slot(l))];
  }
  void lap_offload(PhaseClock& clock) {  // the wait for the tier, where there is one
    if (offload_->store()) clock.lap(Phase::Offload);
  }
  float* x_in(int64_t l) {  // layer l's input; l = L: the final norm's
    return l == m_.config_.num_hidden_layers ? acts_.x_final : acts_.x_in[size_t(offload_->slot(l))];
  }

  // bf16: the copy of the master weights the products read, when the master has changed.
  void refresh_weights() {
    if constexpr (std::is_same_v<X, bf16>) {
      if (wx_version_ == m_.params_version_) return;
      TierArray* tier = m_.master_tier();  // on a tier: walked a chunk at a time, as the update does
      stream_chunks(m_.layout_.total, {{tier, 0}}, [&](size_t c0, size_t c1) {
        convert(m_.master() + c0, wcopy_.data() + c0, int64_t(c1 - c0));
      });
      if (tier) tier->flush();
      wx_version_ = m_.params_version_;
    }
  }

  // `saving`: a backward pass follows (what it reads is kept, on the tier if there is one).
  void embed_and_layers_forward(const Batch& b, bool saving, PhaseClock& clock) {
    const int64_t n = T(b), C = m_.config_.hidden_size;
    if (n > m_.shape_.max_tokens) fail("micro-batch of ", n, " tokens exceeds the model's ", m_.shape_.max_tokens);
    if (n % sp_ranks_ != 0)
      fail("micro-batch of ", n, " tokens does not split over the ", sp_ranks_, " sequence-parallel ranks");
    refresh_weights();
    const int64_t L = m_.config_.num_hidden_layers;
    // ZeRO-3: the embedding's unit, then each layer's, then the head's
    const float* embed = units_.acquire(0, 1);
    units_.lap(clock);
    // tp: zero rows for the tokens of the other ranks' vocabulary rows, then summed
    offload_->begin_forward(saving);
    lap_offload(clock);
    float* e = tpx_.sequence_parallel() ? sp_.tmp : x_in(0);
    embedding_forward(e, b.tokens.data(), embed, n, C, m_.dims_.v0, m_.dims_.V);
    units_.release(0);
    clock.lap(Phase::Other);
    tpx_.sum(e, n, clock);
    if (e != x_in(0)) std::copy(e, e + tpx_.rows(n) * C, x_in(0));  // this rank's rows
    for (int64_t l = 0; l < L; ++l) {
      const LayerWeights lw = layer_weights(l, int(l) + 2, false, clock);  // unit l + 2: the next
      offload_->before_forward(l);
      lap_offload(clock);
      layer_forward(lw, layer_acts(l), x_in(l), x_in(l + 1), b, clock);
      offload_->after_forward(l);
      layer_done(l, false, clock);
      progress_mark("forward, layer", l + 1, L);
    }
  }

  void attention_forward(const LayerActs<X>& a, const Batch& b, PhaseClock& clock) {
    const ModelConfig& c = m_.config_;
    const int64_t n = T(b);
    const AttnDims d{n, n, dims_.H, dims_.KV, dims_.D, c.sliding_window};
    const TokenTags tags{b.idx.data(), b.doc.data()};
    if constexpr (std::is_same_v<X, float>) {
      m_.attention_->forward(d, a.q, a.k, a.v, tags, a.o, a.lse, clock);
    } else {  // the kernel's fp32 output, kept as bf16
      m_.attention_->forward(d, a.q, a.k, a.v, tags, sp_.o32, a.lse, clock);
      convert(sp_.o32, a.o, n * d.H * d.D);
      clock.lap(Phase::Other);
    }
  }

  // The MLP's weights, gradients and buffers: gate and up kept with the layer's activations,
  // or (tiled) made per tile in scratch.
  MlpWeights<X> mlp_weights(const LayerTensorsOf<X>& wx) const { return {wx.w_gate, wx.w_up, wx.w_down}; }
  MlpBuffers<X> mlp_buffers(const LayerActs<X>& a) const {
    const bool kept = a.gate != nullptr;
    return {m_.shape_.mlp_rows(), kept, kept ? a.gate : sp_.gate, kept ? a.up : sp_.up, sp_.h, sp_.dgate, sp_.dup,
            m_.shape_.isa};
  }

  // x_out null: rebuild only what layer_backward reads (--checkpointing full).
  void layer_forward(const LayerWeights& lw, const LayerActs<X>& a, const float* x_in, float* x_out,
                     const Batch& b, PhaseClock& clock) {
    const ModelConfig& c = m_.config_;
    const LayerTensors& w = lw.w;         // fp32: norms
    const LayerTensorsOf<X>& wx = lw.wx;  // products
    const int64_t n = T(b), C = dims_.C, I = dims_.I, H = dims_.H, KV = dims_.KV, D = dims_.D;
    const int64_t nr = tpx_.rows(n), r0 = tpx_.first_row(n);  // this rank's rows of x_in, x_out
    const float eps = float(c.rms_norm_eps);

    rmsnorm_forward(a.ln1 + r0 * C, a.rstd1, x_in, w.input_norm, nr, C, eps);
    clock.lap(Phase::Other);
    tpx_.gather(a.ln1, n, clock);
    if constexpr (std::is_same_v<X, float>) {
      linear_forward(a.q, a.ln1, wx.wq, n, C, H * D);
      linear_forward(a.k, a.ln1, wx.wk, n, C, KV * D);
      linear_forward(a.v, a.ln1, wx.wv, n, C, KV * D);
      clock.lap(Phase::Gemm);
      m_.rope_.forward(a.q, b.pos.data(), n, H);
      m_.rope_.forward(a.k, b.pos.data(), n, KV);
    } else {  // q and k rounded to bf16 once, after RoPE
      linear_forward(sp_.o32, a.ln1, wx.wq, n, C, H * D);
      linear_forward(sp_.dk, a.ln1, wx.wk, n, C, KV * D);
      linear_forward(a.v, a.ln1, wx.wv, n, C, KV * D);
      clock.lap(Phase::Gemm);
      m_.rope_.forward(sp_.o32, a.q, b.pos.data(), n, H);
      m_.rope_.forward(sp_.dk, a.k, b.pos.data(), n, KV);
    }
    clock.lap(Phase::Other);
    attention_forward(a, b, clock);
    linear_forward(sp_.tmp, a.o, wx.wo, n, H * D, C);  // tp: a partial sum over the heads
    clock.lap(Phase::Gemm);
    tpx_.sum(sp_.tmp, n, clock);
    add(a.x_mid, x_in, sp_.tmp, nr * C);
    rmsnorm_forward(a.ln2 + r0 * C, a.rstd2, a.x_mid, w.post_norm, nr, C, eps);
    clock.lap(Phase::Other);
    tpx_.gather(a.ln2, n, clock);
    mlp_forward(x_out ? sp_.tmp : nullptr, a.ln2, mlp_weights(wx), mlp_buffers(a), n, C, I, clock);
    if (!x_out) return;
    tpx_.sum(sp_.tmp, n, clock);  // tp: the MLP's output was a partial sum over I
    add(x_out, a.x_mid, sp_.tmp, nr * C);
    clock.lap(Phase::Other);
  }

  void layer_backward(const LayerWeights& lw, const LayerActs<X>& a, const float* x_in, float* dx,
                      const Batch& b, PhaseClock& clock) {
    // dx [T, C] arrives as d(loss)/d(layer output) and leaves as d(loss)/d(layer input).
    const LayerTensors& w = lw.w;
    const LayerTensorsOf<X>& wx = lw.wx;
    const LayerTensors& g = lw.g;
    const int64_t n = T(b), C = dims_.C, I = dims_.I, H = dims_.H, KV = dims_.KV, D = dims_.D;
    const int64_t nr = tpx_.rows(n);  // dx: this rank's rows (sequence parallelism), else all n

    // MLP: x_out = x_mid + down(silu(gate) * up)
    const X* dy = as_operand(tpx_.whole_rows(dx, sp_.tmp, n, clock), sp_.dy, n * C);
    clock.lap(Phase::Other);
    mlp_backward(sp_.dln, dy, a.ln2, mlp_weights(wx), MlpGrads{g.w_gate, g.w_up, g.w_down}, mlp_buffers(a),
                 n, C, I, clock);
    tpx_.sum(sp_.dln, n, clock);  // tp: partial over I
    rmsnorm_backward(dx, g.post_norm, sp_.dln, a.x_mid, a.rstd2, w.post_norm, nr, C, true);
    clock.lap(Phase::Other);

    // Attention: x_mid = x_in + o_proj(attn(rope(q), rope(k), v))
    if (m_.shape_.checkpointing == Checkpointing::Attention) attention_forward(a, b, clock);
    dy = as_operand(tpx_.whole_rows(dx, sp_.tmp, n, clock), sp_.dy, n * C);
    clock.lap(Phase::Other);
    linear_backward_weight(g.wo, dy, a.o, n, H * D, C);
    linear_backward_input(sp_.do_, dy, wx.wo, n, H * D, C, false);
    clock.lap(Phase::Gemm);
    std::memset(sp_.dq, 0, size_t(n * H * D) * sizeof(float));
    std::memset(sp_.dk, 0, size_t(n * KV * D) * sizeof(float));
    std::memset(sp_.dv, 0, size_t(n * KV * D) * sizeof(float));
    const AttnDims d{n, n, H, KV, D, m_.config_.sliding_window};
    const TokenTags tags{b.idx.data(), b.doc.data()};
    m_.attention_->backward(d, a.q, a.k, a.v, a.o, a.lse, sp_.do_, tags, sp_.dq, sp_.dk, sp_.dv, clock);
    m_.rope_.backward(sp_.dq, b.pos.data(), n, H);
    m_.rope_.backward(sp_.dk, b.pos.data(), n, KV);
    qkv_backward_products(lw, a, n, clock);  // tp: dln is partial over the heads
    clock.lap(Phase::Gemm);
    tpx_.sum(sp_.dln, n, clock);
    rmsnorm_backward(dx, g.input_norm, sp_.dln, x_in, a.rstd1, w.input_norm, nr, C, true);
    clock.lap(Phase::Other);
  }

  // The q, k and v projections' products back to the weights and to the norm's output
  // (sp_.dln), from sp_.dq, dk and dv. In bf16, where the three weights and their gradients
  // are adjacent ([(H+2KV)*D, C]: the layout leaves no padding between them when each size
  // is a multiple of 16 floats), the rounded gradients go side by side into one operand and
  // each way is one product. The k and v products alone are thin (64-row weight-gradient
  // tiles; K = 128 products that add into dln): 54-65% of a thread's bf16 peak in a 30m step
  // on Zen 5, against 80-85% for the rest.
  void qkv_backward_products(const LayerWeights& lw, const LayerActs<X>& a, int64_t n, PhaseClock& clock) {
    const LayerTensorsOf<X>& wx = lw.wx;
    const LayerTensors& g = lw.g;
    const int64_t C = dims_.C, HD = dims_.H * dims_.D, KVD = dims_.KV * dims_.D, QKV = HD + 2 * KVD;
    const auto adjacent = [&](const auto& t) { return t.wk == t.wq + HD * C && t.wv == t.wk + KVD * C; };
    if constexpr (std::is_same_v<X, bf16>) {
      if (adjacent(wx) && adjacent(g)) {
        convert_rows(sp_.dq, n, HD, sp_.dqkvx, QKV);
        convert_rows(sp_.dk, n, KVD, sp_.dqkvx + HD, QKV);
        convert_rows(sp_.dv, n, KVD, sp_.dqkvx + HD + KVD, QKV);
        clock.lap(Phase::Other);
        linear_backward_weight(g.wq, sp_.dqkvx, a.ln1, n, C, QKV);
        linear_backward_input(sp_.dln, sp_.dqkvx, wx.wq, n, C, QKV, false);
        return;
      }
    }
    const X* dq = as_operand(sp_.dq, sp_.dqx, n * HD);
    const X* dk = as_operand(sp_.dk, sp_.dkx, n * KVD);
    const X* dv = as_operand(sp_.dv, sp_.dvx, n * KVD);
    clock.lap(Phase::Other);
    linear_backward_weight(g.wq, dq, a.ln1, n, C, HD);
    linear_backward_weight(g.wk, dk, a.ln1, n, C, KVD);
    linear_backward_weight(g.wv, dv, a.ln1, n, C, KVD);
    linear_backward_input(sp_.dln, dq, wx.wq, n, C, HD, false);
    linear_backward_input(sp_.dln, dk, wx.wk, n, C, KVD, true);
    linear_backward_input(sp_.dln, dv, wx.wv, n, C, KVD, true);
  }

  LlamaModel& m_;
  int64_t sp_ranks_;          // the ranks the residual stream is split over (1: not split)
  Dims dims_;                 // this rank's sizes
  TpExchange tpx_;            // the tp group's sums and gathers
  Buffer<bf16> wcopy_;        // bf16: the master parameters rounded, what products read
  ModelTensorsOf<X> wx_;      // bf16: the weights products read, carved from wcopy_
  uint64_t wx_version_ = 0;
  Buffer<char> acts_buf_, scratch_buf_;
  Activations<X> acts_;
  Scratch<X> sp_;
  LmHeadXent xent_;
  UnitWeights units_;  // the weights and gradients unit by unit (ZeRO-3: gathered)
  std::unique_ptr<ActivationOffload> offload_;  // last: its I/O stops before acts_buf_ goes
};

namespace {
// RoPE with the model's rope_scaling, for positions below max_pos (the sequence length).
RopeTable rope_table(const ModelConfig& config, int64_t max_pos) {
  const RopeFrequencies f = rope_frequencies(config, max_pos);
  return RopeTable(max_pos, f.inv_freq, f.attention_factor);
}
}  // namespace

LlamaModel::LlamaModel(const ModelConfig& config, const ModelShape& shape, AttentionOp* attention,
                       ParamShards* shards, TpComm* tp)
    : config_(config),
      shape_(shape),
      tp_(tp && tp->size() > 1 ? tp : nullptr),
      split_(tp_ ? TpSplit{tp_->size(), tp_->rank()} : TpSplit{}),
      dims_(tp_dims(config, split_)),
      layout_(ParamLayout::llama(config, split_.size)),
      params_(shards || shape.master_tier.on() ? 0 : layout_.total),
      grads_(shards ? 0 : layout_.total),
      rope_(rope_table(config, shape.max_pos)),
      own_attention_(attention ? nullptr
                               : std::make_unique<LocalAttention>(
                                     shape.max_tokens, dims_.H, dims_.KV, config.head_dim(), shape.blocks,
                                     shape.isa, shape.precision)),
      attention_(attention ? attention : own_attention_.get()),
      base_attention_(attention_),
      shards_(shards) {
  if (tp_ && shards_ && shape.sequence_parallel)
    fail(knob_name(Knob::Zero), " 3 does not combine with ", knob_name(Knob::TpSequenceParallel), " (the norm weights' gradients are ",
         "summed over the tp group from whole arrays): use ", knob_name(Knob::Zero), " 0, 1 or 2 with it");
  if (tp_ && shape.sequence_parallel && shape.max_tokens % split_.size != 0)
    fail("sequence parallelism splits the ", shape.max_tokens, " tokens of a micro-batch over ",
         split_.size, " tp ranks: they must be divisible");
  if (const std::string e = tp_split_error(config, split_.size); !e.empty()) fail(e);
  if (shape.master_tier.on()) {
    if (shards_ || shape.precision != Precision::Bf16)
      fail("the fp32 master weights go to a tier only in bf16 without ", knob_name(Knob::Zero),
           " 3 (in fp32 every product reads them): use ", knob_name(Knob::Precision), " bf16, or keep them in memory");
    params_tier_ = std::make_unique<TierArray>(shape.master_tier, layout_.total, "--offload-master-weights");
  }
  if (!shards_) g_ = carve(layout_, config_, grads_.data());  // the norms' (sequence parallelism sums them)
  if (shape.precision == Precision::Bf16) passes_ = std::make_unique<LlamaPassesOf<bf16>>(*this);
  else passes_ = std::make_unique<LlamaPassesOf<float>>(*this);
}

LlamaModel::~LlamaModel() = default;

ModelMemory LlamaModel::memory(const ModelConfig& config, const ModelShape& shape, int threads,
                               int tp) {
  const size_t f = sizeof(float), params = ParamLayout::llama(config, tp).total;
  const Dims dims(config, tp_dims(config, {tp, 0}), tp > 1 && shape.sequence_parallel ? tp : 1);
  const bool b16 = shape.precision == Precision::Bf16;
  ModelMemory m;
  m.params_grads = 2 * params * f + (b16 ? params * sizeof(bf16) : 0);
  if (shape.master_tier.on()) {  // in memory: the chunks walked by the copy's refresh and the update
    m.master_offloaded = params * f;
    m.params_grads -= params * f - std::min(params * f, TierArray::kWindowBytes);
  }
  m.optimizer = 2 * params * f;
  const AttnLimits lim{shape.max_tokens, shape.max_tokens, dims.H, dims.KV, dims.D};
  const size_t kernels = AttentionKernel::workspace_bytes_for(attention_kernel(), lim, shape.blocks, threads, shape.precision) +
                         LmHeadXent::workspace_bytes_for(shape.max_tokens, config.vocab_size / tp, shape.precision);
  const size_t moved = size_t(moved_sets(config.num_hidden_layers, shape));
  if (b16) {
    Activations<bf16> a;
    Scratch<bf16> s;
    m.activations = carve_activations(Carver{nullptr}, dims, shape, a);
    m.offloaded = moved * a.set_bytes;
    m.scratch = carve_scratch(Carver{nullptr}, dims, shape, s) + kernels;
  } else {
    Activations<float> a;
    Scratch<float> s;
    m.activations = carve_activations(Carver{nullptr}, dims, shape, a);
    m.offloaded = moved * a.set_bytes;
    m.scratch = carve_scratch(Carver{nullptr}, dims, shape, s) + kernels;
  }
  return m;
}

void LlamaModel::release_master() {
  if (!params_tier_) return;
  params_tier_->done(0, params_tier_->size());
  params_tier_->flush();
}

void LlamaModel::zero_grads() {
  float* g = shards_ ? shards_->grad_shard() : grads_.data();
  const int64_t n = int64_t(shards_ ? shards_->size() : grads_.size());
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) g[i] = 0.0f;
}

void LlamaModel::take_tokens(const Batch& b) {
  if (b.spread && !spread_attention_)
    fail("a micro-batch spread over the ranks sharing the step reached a model without a spread attention");
  attention_ = b.spread ? spread_attention_ : base_attention_;
  attention_->new_tokens({b.idx.data(), b.doc.data()}, int64_t(b.idx.size()), config_.sliding_window);
}

double LlamaModel::forward(const Batch& b, PhaseClock& clock, int32_t* argmax, float* token_loss) {
  take_tokens(b);
  return passes_->forward(b, clock, argmax, token_loss);
}

double LlamaModel::forward_backward(const Batch& b, float grad_scale, PhaseClock& clock) {
  take_tokens(b);
  return passes_->forward_backward(b, grad_scale, clock);
}

}  // namespace lct
