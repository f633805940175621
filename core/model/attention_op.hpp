// How a layer's attention is computed: over this rank's tokens only, or with the keys and
// values of a whole context-parallel group (core/parallel/ring_attention.hpp). The model
// calls it without knowing which; implementations charge their time to the clock
// (attention compute, and communication they wait for).
#pragma once
#include <cstddef>
#include <string>

#include "common/clock.hpp"
#include "kernels/attention.hpp"
#include "kernels/attention_kernel.hpp"

namespace lct {

// q, k, v (and o, dout in backward) are the model's activation type X: float, or bf16 in
// mixed precision. o and lse come out fp32 (the model stores o as X); gradients are fp32.
class AttentionOp {
 public:
  virtual ~AttentionOp() = default;
  // Bytes this rank has sent to others since construction (0 on one rank).
  virtual size_t bytes_sent() const { return 0; }
  // Seconds this rank has waited on exchanges for a slower rank (not for a transfer) since
  // construction: the ring's shared-memory hops tell; 0 where no exchange can.
  virtual double peer_wait_s() const { return 0; }
  virtual bool tells_peer_wait() const { return false; }  // whether peer_wait_s can be non-zero
  // The ring that carries this op's K/V, if any (a ring's own; a hybrid's, across its
  // Ulysses groups), for the start-up and closing reports: where this rank's hops go
  // ("shm to rank 1, shm from rank 3"), its traffic, and how many of its steps the last
  // micro-batch took. ranks = 0 where there is no ring.
  struct RingReport {
    std::string transport;
    size_t bytes_sent = 0, bytes_sent_shm = 0;
    int steps = 0, ranks = 0;
  };
  virtual RingReport ring_report() const { return {}; }
  // Where every rank's ring hops go, one text for the group (collective over the cp group:
  // every rank calls it); "" where there is no ring.
  virtual std::string ring_hops() const { return ""; }
  // The tags of the tokens every call until the next new_tokens() will carry (the model
  // calls it once per micro-batch, before its first layer; n tokens on this rank): a cp
  // attention may plan its exchanges here, once (which blocks anyone sees under `window`).
  // Before the first call every exchange takes place (never wrong, only slower); after
  // it, calls with other tags are wrong.
  virtual void new_tokens(TokenTags tags, int64_t n, int64_t window) {}
  // q [T, H*D], k, v [T, KV*D] of this rank's tokens; o, lse overwritten.
  virtual void forward(const AttnDims& d, const float* q, const float* k, const float* v,
                       TokenTags tags, float* o, float* lse, PhaseClock& clock) = 0;
  virtual void forward(const AttnDims& d, const bf16* q, const bf16* k, const bf16* v,
                       TokenTags tags, float* o, float* lse, PhaseClock& clock) = 0;
  // Adds the gradients to dq, dk, dv (zeroed by the caller).
  virtual void backward(const AttnDims& d, const float* q, const float* k, const float* v,
                        const float* o, const float* lse, const float* dout, TokenTags tags,
                        float* dq, float* dk, float* dv, PhaseClock& clock) = 0;
  virtual void backward(const AttnDims& d, const bf16* q, const bf16* k, const bf16* v,
                        const bf16* o, const float* lse, const bf16* dout, TokenTags tags,
                        float* dq, float* dk, float* dv, PhaseClock& clock) = 0;
};

// Implements both activation types through Impl's templates fwd<X> and bwd<X>.
template <class Impl>
class AttentionOpOf : public AttentionOp {
 public:
  void forward(const AttnDims& d, const float* q, const float* k, const float* v, TokenTags t,
               float* o, float* lse, PhaseClock& c) override {
    self().fwd(d, q, k, v, t, o, lse, c);
  }
  void forward(const AttnDims& d, const bf16* q, const bf16* k, const bf16* v, TokenTags t,
               float* o, float* lse, PhaseClock& c) override {
    self().fwd(d, q, k, v, t, o, lse, c);
  }
  void backward(const AttnDims& d, const float* q, const float* k, const float* v, const float* o,
                const float* lse, const float* dout, TokenTags t, float* dq, float* dk, float* dv,
                PhaseClock& c) override {
    self().bwd(d, q, k, v, o, lse, dout, t, dq, dk, dv, c);
  }
  void backward(const AttnDims& d, const bf16* q, const bf16* k, const bf16* v, const bf16* o,
                const float* lse, const bf16* dout, TokenTags t, float* dq, float* dk, float* dv,
                PhaseClock& c) override {
    self().bwd(d, q, k, v, o, lse, dout, t, dq, dk, dv, c);
  }

 private:
  Impl& self() { return static_cast<Impl&>(*this); }
};

// Single rank: the attention kernel (fused or oneDNN's tiles: attention_kernel.hpp) on the
// local tokens.
class LocalAttention : public AttentionOpOf<LocalAttention> {
 public:
  LocalAttention(int64_t max_tokens, int64_t H, int64_t KV, int64_t D, AttnBlocks blocks, Isa isa,
                 Precision products)
      : kernel_({max_tokens, max_tokens, H, KV, D}, blocks, isa, products),
        delta_(size_t(H * max_tokens)) {}
  template <class X>
  void fwd(const AttnDims& d, const X* q, const X* k, const X* v, TokenTags tags, float* o,
           float* lse, PhaseClock& clock) {
    kernel_.forward(d, q, k, v, tags, tags, o, lse);
    clock.lap(Phase::AttnFwd);
  }
  template <class X>
  void bwd(const AttnDims& d, const X* q, const X* k, const X* v, const X* o, const float* lse,
           const X* dout, TokenTags tags, float* dq, float* dk, float* dv, PhaseClock& clock) {
    attention_delta(o, dout, d.Tq, d.H, d.D, delta_.data());
    kernel_.backward(d, q, k, v, lse, delta_.data(), dout, tags, tags, dq, dk, dv);
    clock.lap(Phase::AttnBwd);
  }

 private:
  AttentionKernel kernel_;
  Buffer<float> delta_;
};

}  // namespace lct
