// Attention across a context-parallel group: every rank holds a zigzag shard of each
// sequence (model/shard.hpp) and needs every other rank's keys and values.
//   RingAttention       K/V blocks travel the ring, one hop per step, overlapped with the
//                       flash kernel on the block in hand; partial results merged in fp32
//                       by log-sum-exp. Backward: K/V travel again with an fp32 dK/dV
//                       accumulator that arrives home after cp hops; dQ stays local.
//                       Under a sliding window the ring stops after the last hop anyone
//                       needs (a contiguous split needs 1 hop when W <= S/cp) and the
//                       accumulators go straight home from there; a block no local query
//                       sees is passed on without computing.
//   AllGatherAttention  Llama 3's variant: all-gather K/V once per layer, one local kernel
//                       call under the global mask, reduce-scatter dK/dV to their owners.
// Which keys a query sees comes from the tokens' true indices and documents carried with
// every block, so the zigzag step rules (own block causal; an earlier rank's block: all
// local queries vs its early chunk; a later rank's: the local late chunk vs all its keys)
// and packed-document masks are applied by the kernel's tile classification; the ring
// code knows nothing of softmax or masks.
#pragma once
#include <mpi.h>

#include "model/attention_op.hpp"
#include "parallel/ring.hpp"
#include "sys/memory.hpp"

namespace lct {

// One rank's K/V and token tags in one buffer: [k | v | idx | doc], what travels. K and V
// are in the activation type (bf16 in mixed precision: half the bytes on the wire).
class KvBlocks {
 public:
  // `count` blocks of `tokens` tokens, back to back; `elem` bytes per K/V element (4 fp32,
  // 2 bf16)
  KvBlocks(int64_t tokens, int64_t kvd, int count, size_t elem);
  // Two blocks in memory owned elsewhere (a ring transport's slots).
  KvBlocks(int64_t tokens, int64_t kvd, size_t elem, char* first, char* second);
  static size_t bytes_for(int64_t tokens, int64_t kvd, size_t elem) {
    return size_t(tokens) * (2 * size_t(kvd) * elem + 2 * sizeof(int32_t));
  }
  size_t bytes() const { return bytes_; }
  char* block(int i) { return external_[0] ? external_[i] : data_.data() + size_t(i) * bytes_; }
  template <class X>
  X* k(int i) { return reinterpret_cast<X*>(block(i)); }
  template <class X>
  X* v(int i) { return k<X>(i) + tokens_ * kvd_; }
  TokenTags tags(int i) {
    int32_t* idx = reinterpret_cast<int32_t*>(block(i) + 2 * size_t(tokens_ * kvd_) * elem_);
    return {idx, idx + tokens_};
  }
  template <class X>
  void pack(int i, const X* k, const X* v, TokenTags t);

 private:
  int64_t tokens_, kvd_;
  size_t elem_, bytes_;
  Buffer<char> data_;
  char* external_[2] = {nullptr, nullptr};
};

class RingAttention : public AttentionOpOf<RingAttention> {
 public:
  // `activations`: the type of q/k/v the model passes (K/V travel in it); `products` the
  // kernel's (bf16 only where the ISA has bf16 tiles).
  RingAttention(MPI_Comm cp, int64_t local_tokens, int64_t H, int64_t KV, int64_t D,
                AttnBlocks blocks, Isa isa, Precision activations,
                CpTransport transport = CpTransport::Auto);
  template <class X>
  void fwd(const AttnDims& d, const X* q, const X* k, const X* v, TokenTags tags, float* o,
           float* lse, PhaseClock& clock);
  template <class X>
  void bwd(const AttnDims& d, const X* q, const X* k, const X* v, const X* o, const float* lse,
           const X* dout, TokenTags tags, float* dq, float* dk, float* dv, PhaseClock& clock);
  // Allgathers every rank's runs of tags (tag_runs) and plans the ring from them.
  void new_tokens(TokenTags tags, int64_t n, int64_t window) override;
  int steps() const { return steps_; }  // of the current plan: 1 + the hops K/V make
  int ranks() const { return n_; }
  RingCounters counters() const;  // of every transport of the ring, replaced ones too
  size_t bytes_sent() const override { return counters().bytes_sent; }
  size_t bytes_sent_shm() const { return counters().bytes_sent_shm; }
  double peer_wait_s() const override { return counters().peer_wait_s; }
  bool tells_peer_wait() const override { return kv_ring_->sends_shm(); }
  std::string describe() const { return kv_ring_->describe(); }
  std::string hops() const { return lct::ring_hops(*kv_ring_, comm_); }  // collective
  RingReport ring_report() const override {
    const RingCounters c = counters();
    return {describe(), c.bytes_sent, c.bytes_sent_shm, steps_, n_};
  }
  std::string ring_hops() const override { return hops(); }
  // The size of every buffer below: the constructor allocates these, and the memory estimate
  // made before any is allocated (buffer_bytes) is their sum.
  struct Sizes {
    size_t kv_slot;     // bytes of one K/V block: kv_ring_'s two slots
    size_t dkv;         // floats of one [dk | dv]: dkv_[2], dkv_ring_'s and dkv_home_'s slots
    size_t o_part, lse; // floats: o_part_; lse_part_ and delta_ each
    double total() const { return 2.0 * double(kv_slot) + 4.0 * (4.0 * double(dkv) + double(o_part) + 2.0 * double(lse)); }
  };
  static Sizes sizes(int64_t Tl, int64_t H, int64_t KV, int64_t D, Precision activations);
  static double buffer_bytes(int64_t Tl, int64_t H, int64_t KV, int64_t D, Precision activations) {
    return sizes(Tl, H, KV, D, activations).total();
  }
  // What this instance's buffers take, read from the buffers and transports themselves
  // (dkv_home_, made at the first backward pass that needs it, at the size it is made with).
  double allocated_bytes() const;

 private:
  RingTransport& dkv_home();  // from the last step's holder of a block to its owner
  MPI_Comm comm_;
  CpTransport transport_;
  int n_;
  int64_t tl_, kvd_;                   // local tokens (at most), K/V width
  Sizes sizes_;
  AttentionKernel kernel_;
  int home_shift_ = 0;                 // dkv_home_'s
  RingCounters home_retired_;          // of the dkv_home_s a plan with another shift replaced
  int steps_;                          // ring steps of the current tokens (n_ without a plan)
  std::vector<char> sees_;             // [step]: local queries see the block in hand
  std::unique_ptr<RingTransport> kv_ring_, dkv_ring_, dkv_home_;
  KvBlocks kv_;                        // kv_ring_'s two slots: the block in hand, the one arriving
  Buffer<float> o_part_, lse_part_, delta_;
  Buffer<float> dkv_[2];               // [dk | dv] of the block in hand, alternating
  float* dkv_in_;                      // dkv_ring_'s slot 0: the [dk | dv] arriving
};

class AllGatherAttention : public AttentionOpOf<AllGatherAttention> {
 public:
  AllGatherAttention(MPI_Comm cp, int64_t local_tokens, int64_t H, int64_t KV, int64_t D,
                     AttnBlocks blocks, Isa isa, Precision activations);
  template <class X>
  void fwd(const AttnDims& d, const X* q, const X* k, const X* v, TokenTags tags, float* o,
           float* lse, PhaseClock& clock);
  template <class X>
  void bwd(const AttnDims& d, const X* q, const X* k, const X* v, const X* o, const float* lse,
           const X* dout, TokenTags tags, float* dq, float* dk, float* dv, PhaseClock& clock);
  size_t bytes_sent() const override { return bytes_sent_; }
  // The size of every buffer below: the constructor allocates these, and the memory estimate
  // made before any is allocated (buffer_bytes) is their sum.
  struct Sizes {
    size_t kv_block;  // bytes of one K/V block: own_ (1) and gathered_ (n)
    int n;
    size_t all;       // elements of K (or V) of the whole sequence: k_all_, v_all_ (activation
                      // type); dk_all_, dv_all_ and twice in dkv_send_ (floats)
    size_t elem;      // bytes of an activation
    size_t dkv_own, delta, tokens;  // floats; int32 idx_all_ and doc_all_ each
    double total() const {
      return double(n + 1) * double(kv_block) + 2.0 * double(all * elem) +
             4.0 * (4.0 * double(all) + double(dkv_own) + double(delta)) + 8.0 * double(tokens);
    }
  };
  static Sizes sizes(int n, int64_t Tl, int64_t H, int64_t KV, int64_t D, Precision activations);
  static double buffer_bytes(int n, int64_t Tl, int64_t H, int64_t KV, int64_t D,
                             Precision activations) {
    return sizes(n, Tl, H, KV, D, activations).total();
  }
  double allocated_bytes() const;  // what this instance's buffers take, read from them

 private:
  template <class X>
  void gather(const X* k, const X* v, TokenTags tags, int64_t Tl);  // into all_*
  MPI_Comm comm_;
  int n_;
  int64_t kvd_;
  size_t elem_;
  Sizes sizes_;
  size_t bytes_sent_ = 0;
  AttentionKernel kernel_;
  KvBlocks own_, gathered_;
  Buffer<char> k_all_, v_all_;   // [n * Tl, KV*D] in the activation type
  Buffer<float> dk_all_, dv_all_, dkv_send_, dkv_own_, delta_;
  Buffer<int32_t> idx_all_, doc_all_;
};


}  // namespace lct
