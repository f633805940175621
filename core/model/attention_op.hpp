// How a layer's attention is computed: over this rank's tokens only, or with the keys and
// values of a whole context-parallel group (core/parallel/ring_attention.hpp). The model
// calls it without knowing which; implementations charge their time to the clock
// (attention compute, and communication they wait for).
#pragma once
#include <cstddef>

#include "common/clock.hpp"
#include "kernels/attention.hpp"

namespace lct {

class AttentionOp {
 public:
  virtual ~AttentionOp() = default;
  // q [T, H*D], k, v [T, KV*D] of this rank's tokens; o, lse overwritten.
  virtual void forward(const AttnDims& d, const float* q, const float* k, const float* v,
                       TokenTags tags, float* o, float* lse, PhaseClock& clock) = 0;
  // Adds the gradients to dq, dk, dv (zeroed by the caller).
  virtual void backward(const AttnDims& d, const float* q, const float* k, const float* v,
                        const float* o, const float* lse, const float* dout, TokenTags tags,
                        float* dq, float* dk, float* dv, PhaseClock& clock) = 0;
};

// Single rank: the flash kernel on the local tokens.
class LocalAttention : public AttentionOp {
 public:
  LocalAttention(int64_t max_tokens, int64_t H, int64_t KV, int64_t D, AttnBlocks blocks, Isa isa)
      : flash_({max_tokens, max_tokens, H, KV, D}, blocks, isa), delta_(size_t(H * max_tokens)) {}
  void forward(const AttnDims& d, const float* q, const float* k, const float* v, TokenTags tags,
               float* o, float* lse, PhaseClock& clock) override {
    flash_.forward(d, q, k, v, tags, tags, o, lse);
    clock.lap(Phase::AttnFwd);
  }
  void backward(const AttnDims& d, const float* q, const float* k, const float* v, const float* o,
                const float* lse, const float* dout, TokenTags tags, float* dq, float* dk,
                float* dv, PhaseClock& clock) override {
    attention_delta(o, dout, d.Tq, d.H, d.D, delta_.data());
    flash_.backward(d, q, k, v, lse, delta_.data(), dout, tags, tags, dq, dk, dv);
    clock.lap(Phase::AttnBwd);
  }

 private:
  FlashAttention flash_;
  Buffer<float> delta_;
};

}  // namespace lct
