// A Llama decoder over flat buffers: parameters and gradients each one allocation (layout
// in params.hpp), activations one allocation carved per layer, backward scratch one more.
// forward_backward() is the training step of one micro-batch and reads as a list of
// *_forward / *_backward calls (llama.cpp).
//
// Precision (ModelShape::precision): fp32, or bf16 mixed precision, where the operands of
// every matrix product - weights (a bf16 copy of the fp32 master parameters), the
// activations kept for backward, and the gradients flowing into products - are bf16, while
// the residual stream, norms, softmax statistics, loss, gradients of the parameters and the
// optimizer stay fp32. The activation type X is float or bf16 accordingly.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/bf16.hpp"
#include "common/clock.hpp"
#include "kernels/attention.hpp"
#include "kernels/layers.hpp"
#include "kernels/xent.hpp"
#include "model/attention_op.hpp"
#include "model/checkpointing.hpp"
#include "model/batch.hpp"
#include "model/param_shards.hpp"
#include "model/params.hpp"
#include "model/tp.hpp"
#include "sys/memory.hpp"
#include "sys/tier_array.hpp"
#include "sys/tier_store.hpp"

namespace lct {


struct ModelShape {
  int64_t max_tokens;  // T = micro-batch x sequence length
  int64_t max_pos;     // longest RoPE position + 1 (the sequence length)
  Checkpointing checkpointing = Checkpointing::None;
  AttnBlocks blocks = {};
  Isa isa = Isa::Generic;                  // kernel path: the caller's choice (Topology::isa)
  Precision precision = Precision::Fp32;   // of matrix products and what they read
  // With tensor parallelism: the residual stream, norms and their activations sharded over
  // the tp group by tokens (Megatron's sequence parallelism; reduce-scatter + all-gather in
  // place of each all-reduce). max_tokens must be divisible by the tp degree.
  bool sequence_parallel = false;
  // Where the saved activations of all but a few layers wait between the forward and the
  // backward pass (activation_offload.hpp); none: in memory.
  TierSpec offload_activations = {};
  int64_t offload_layers = -1;  // the first N layers' sets move there (-1: all but the last 3)
  // Tokens per tile of the MLP (mlp.hpp): 0, or at least max_tokens, runs it untiled.
  int64_t mlp_tile = 0;
  bool mlp_tiled() const { return mlp_tile > 0 && mlp_tile < max_tokens; }
  int64_t mlp_rows() const { return mlp_tiled() ? mlp_tile : max_tokens; }  // rows of its [R, I] buffers
  // Where the fp32 master parameters live (bf16 only, where products read the bf16 copy):
  // none, in memory; else a TierArray walked in chunks by the copy's refresh and the update.
  TierSpec master_tier = {};
};

// Bytes a model of this shape needs, computed without allocating anything.
struct ModelMemory {
  size_t params_grads = 0, optimizer = 0, activations = 0, scratch = 0;
  size_t offloaded = 0;  // activations on --offload-activations' tier (not in memory)
  size_t master_offloaded = 0;  // the fp32 master parameters on ModelShape::master_tier (params_grads: its window)
  size_t total() const { return params_grads + optimizer + activations + scratch; }
};

class LlamaPasses;  // the forward and backward passes in the activation type (llama.cpp)

class LlamaModel {
 public:
  // tp > 1: one tensor-parallel rank's share (its slices, activations and scratch).
  static ModelMemory memory(const ModelConfig& config, const ModelShape& shape, int threads,
                            int tp = 1);

  // `attention` computes every layer's attention (a context-parallel ring, say); null means
  // the flash kernel on this rank's tokens. `shards` (ZeRO-3, fp32 only): the parameters
  // and gradients live there, a shard per rank, and the model holds no whole array of
  // either (params() and grads() are null; the passes gather a unit at a time).
  // `tp` (tensor parallelism, tp.hpp): this rank holds its slices of the weights, layout()
  // is their local layout, and the passes sum over the group after every row-parallel
  // product (forward) and column-parallel input gradient (backward). `attention` then works
  // on the local heads. Not with `shards`.
  LlamaModel(const ModelConfig& config, const ModelShape& shape, AttentionOp* attention = nullptr,
             ParamShards* shards = nullptr, TpComm* tp = nullptr);
  ~LlamaModel();
  // The attention of micro-batches marked `spread` (batch.hpp): a ring over every rank that
  // shares the step's tokens. Null (the default): the model's own attention runs them all.
  void set_spread_attention(AttentionOp* spread) { spread_attention_ = spread; }

  const ModelConfig& config() const { return config_; }
  const ModelShape& shape() const { return shape_; }
  const ParamLayout& layout() const { return layout_; }
  // The fp32 master parameters (the optimizer's and the checkpoints') and their gradients.
  // Writing through params() is seen by the next pass (bf16: it refreshes its copy).
  float* params() {
    ++params_version_;
    return master();
  }
  // The master parameters' tier (ModelShape::master_tier), or null. Writes through params()
  // stay in memory until release_master() writes them back and drops them.
  TierArray* master_tier() { return params_tier_.get(); }
  void release_master();
  float* grads() { return grads_.data(); }
  ParamShards* param_shards() const { return shards_; }
  TpComm* tp() const { return tp_; }  // null without tensor parallelism
  TpSplit tp_split() const { return split_; }
  void zero_grads();  // ZeRO-3: the shard's gradients

  // Loss sum over scored targets of the micro-batch; adds grad_scale * d(loss sum)/d(params)
  // to the gradients (grad_scale = 1 / valid targets of the whole step).
  double forward_backward(const Batch& b, float grad_scale, PhaseClock& clock);
  // Loss sum only; argmax [T] (optional) receives the greedy prediction at every position,
  // token_loss [T] (optional) every position's loss (0 where not scored).
  double forward(const Batch& b, PhaseClock& clock, int32_t* argmax = nullptr,
                 float* token_loss = nullptr);

 private:
  friend class LlamaPasses;
  template <class X>
  friend class LlamaPassesOf;
  ModelConfig config_;
  ModelShape shape_;
  TpComm* tp_;
  TpSplit split_;
  TpDims dims_;  // this rank's heads, KV heads, SwiGLU width and vocabulary rows
  ParamLayout layout_;
  Buffer<float> params_, grads_;
  std::unique_ptr<TierArray> params_tier_;  // the master instead of params_, on a tier
  float* master() { return params_tier_ ? params_tier_->data() : params_.data(); }
  ModelTensors g_;  // views of grads_ (not under ZeRO-3)
  uint64_t params_version_ = 1;
  RopeTable rope_;
  std::unique_ptr<AttentionOp> own_attention_;
  AttentionOp* attention_;         // the micro-batch's: base_attention_ or spread_attention_
  AttentionOp* base_attention_;
  AttentionOp* spread_attention_ = nullptr;
  ParamShards* shards_;
  void take_tokens(const Batch& b);  // picks the micro-batch's attention and hands it the tags
  std::unique_ptr<LlamaPasses> passes_;
};

}  // namespace lct
