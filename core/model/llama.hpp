// A Llama decoder over flat buffers: parameters and gradients each one allocation (layout
// in params.hpp), activations one allocation carved per layer, backward scratch one more.
// forward_backward() is the training step of one micro-batch and reads as a list of
// *_forward / *_backward calls.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "kernels/attention.hpp"
#include "model/attention_op.hpp"
#include "kernels/layers.hpp"
#include "kernels/xent.hpp"
#include "model/batch.hpp"
#include "model/params.hpp"
#include "sys/memory.hpp"

namespace lct {

// What is kept from the forward pass for the backward pass.
enum class Checkpointing {
  None,       // every activation of every layer
  Attention,  // everything but the attention output, recomputed (flash forward) in backward
  Full,       // only each layer's input; the whole layer is recomputed in backward
};
Checkpointing parse_checkpointing(const std::string& s);  // "none" | "attention" | "full"
const char* to_string(Checkpointing c);

struct ModelShape {
  int64_t max_tokens;  // T = micro-batch x sequence length
  int64_t max_pos;     // longest RoPE position + 1 (the sequence length)
  Checkpointing checkpointing = Checkpointing::None;
  AttnBlocks blocks = {};
  Isa isa = Isa::Generic;  // kernel path: the caller's choice (Topology::isa)
};

// Activations of one layer, [T, ...] each.
struct LayerActs {
  float* ln1;     // [T, C]   input_layernorm output
  float* rstd1;   // [T]
  float* q;       // [T, H*D] after RoPE
  float* k;       // [T, KV*D] after RoPE
  float* v;       // [T, KV*D]
  float* o;       // [T, H*D] attention output
  float* lse;     // [H, T]
  float* x_mid;   // [T, C]   residual after attention
  float* ln2;     // [T, C]
  float* rstd2;   // [T]
  float* gate;    // [T, I]
  float* up;      // [T, I]
};

// Bytes a model of this shape needs, computed without allocating anything.
struct ModelMemory {
  size_t params_grads = 0, optimizer = 0, activations = 0, scratch = 0;
  size_t total() const { return params_grads + optimizer + activations + scratch; }
};

struct ScratchPointers {  // backward scratch, one set shared by all layers
  float *dx, *dln, *tmp;       // [T, C]
  float *h, *dgate, *dup;      // [T, I]
  float *do_, *dq;             // [T, H*D]
  float *dk, *dv;              // [T, KV*D]
};

struct Carver {  // consecutive 64-byte aligned pieces of one allocation; counts when base is null
  float* base;
  size_t used = 0;
  float* take(int64_t n) {
    float* p = base ? base + used : nullptr;
    used += (size_t(n) + 15) / 16 * 16;
    return p;
  }
};
size_t carve_scratch(Carver c, const ModelConfig& config, int64_t T, ScratchPointers& p);

class LlamaModel {
 public:
  static ModelMemory memory(const ModelConfig& config, const ModelShape& shape, int threads);

  // `attention` computes every layer's attention (a context-parallel ring, say); null means
  // the flash kernel on this rank's tokens.
  LlamaModel(const ModelConfig& config, const ModelShape& shape, AttentionOp* attention = nullptr);

  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  float* params() { return params_.data(); }
  float* grads() { return grads_.data(); }
  void zero_grads();

  // Loss sum over scored targets of the micro-batch; adds grad_scale * d(loss sum)/d(params)
  // to the gradients (grad_scale = 1 / valid targets of the whole step).
  double forward_backward(const Batch& b, float grad_scale, PhaseClock& clock);
  // Loss sum only; argmax [T] (optional) receives the greedy prediction at every position.
  double forward(const Batch& b, PhaseClock& clock, int32_t* argmax = nullptr);


 private:
  void embed_and_layers_forward(const Batch& b, PhaseClock& clock);
  void layer_forward(int64_t l, const LayerActs& a, const float* x_in, float* x_out,
                     const Batch& b, PhaseClock& clock);
  void attention_forward(const LayerActs& a, const Batch& b, PhaseClock& clock);
  void layer_backward(int64_t l, const LayerActs& a, const float* x_in, float* dx, const Batch& b,
                      PhaseClock& clock);
  LayerActs layer_acts(int64_t l);  // storage or the recompute scratch, per policy
  int64_t T(const Batch& b) const { return b.tokens_total(); }

  ModelConfig config_;
  ModelShape shape_;
  ParamLayout layout_;
  Buffer<float> params_, grads_;
  ModelTensors w_, g_;

  Buffer<float> acts_;               // everything the forward keeps
  std::vector<float*> x_in_;         // [L+1] layer inputs [T, C]; x_in_[L] feeds the final norm
  std::vector<LayerActs> stored_;    // per layer, or one shared set when recomputed
  float* lnf_ = nullptr;             // [T, C] final norm output
  float* rstdf_ = nullptr;           // [T]

  Buffer<float> scratch_;
  ScratchPointers sp_;
  RopeTable rope_;
  std::unique_ptr<AttentionOp> own_attention_;
  AttentionOp* attention_;
  LmHeadXent xent_;
};

}  // namespace lct
