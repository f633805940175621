// Ulysses context parallelism (DeepSpeed-Ulysses): the cp ranks trade the sequence split for
// a head split. An all-to-all turns each rank's [Tl tokens, H heads] of q, k, v into [cp x Tl
// tokens, H/cp heads]; the flash kernel runs on the whole sequence for those heads; an
// all-to-all turns the output back. The backward pass mirrors it. Which key a query sees
// still comes from the tokens' true indices and documents (all-gathered once per call), so
// zigzag shards, packed documents and padding work as in the ring. Needs H divisible by cp,
// and KV divisible by cp or cp by KV: with fewer KV heads than ranks each KV head goes to
// the cp / KV ranks whose query heads read it (replicated: the K/V all-to-all volume grows
// by cp / KV, and their dK/dV are summed on the way back). The communication per layer is
// otherwise independent of cp (each rank sends (cp-1)/cp of its q, k, v, o), where the
// ring's grows with it. The computation on the gathered sequence is
// an AttentionOp of its own, so hybrid context parallelism (hybrid_attention.hpp) is these
// same all-to-alls around a ring.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>

#include "model/attention_op.hpp"
#include "sys/memory.hpp"

namespace lct {

class UlyssesAttention : public AttentionOpOf<UlyssesAttention> {
 public:
  // Plain Ulysses over the whole cp group: the inner op is the flash kernel on the whole
  // sequence. Throws (the same on every rank) when check_degree does.
  UlyssesAttention(MPI_Comm cp, int64_t local_tokens, int64_t H, int64_t KV, int64_t D,
                   AttnBlocks blocks, Isa isa, Precision activations);
  // The all-to-alls over `group` (n ranks) around `inner`, which computes the attention of
  // the group's n x local_tokens tokens (the ranks' tokens concatenated in group-rank order,
  // with their tags) for H/n query heads and kv_heads(n, KV) key/value heads: the flash
  // kernel for plain Ulysses, a RingAttention across the groups for hybrid
  // (hybrid_attention.hpp). H must be divisible by n, and KV by n or n by KV (the caller
  // checks, with its own message).
  UlyssesAttention(MPI_Comm group, int64_t local_tokens, int64_t H, int64_t KV, int64_t D,
                   Precision activations, std::unique_ptr<AttentionOp> inner);
  template <class X>
  void fwd(const AttnDims& d, const X* q, const X* k, const X* v, TokenTags tags, float* o,
           float* lse, PhaseClock& clock);
  template <class X>
  void bwd(const AttnDims& d, const X* q, const X* k, const X* v, const X* o, const float* lse,
           const X* dout, TokenTags tags, float* dq, float* dk, float* dv, PhaseClock& clock);
  // The all-to-alls' bytes and the inner op's.
  size_t bytes_sent() const override { return bytes_sent_ + inner_->bytes_sent(); }
  double peer_wait_s() const override { return inner_->peer_wait_s(); }  // a hybrid's ring
  bool tells_peer_wait() const override { return inner_->tells_peer_wait(); }
  RingReport ring_report() const override { return inner_->ring_report(); }  // a hybrid's ring
  std::string ring_hops() const override { return inner_->ring_hops(); }
  const AttentionOp& inner() const { return *inner_; }
  // The inner op plans for the group's whole sequence (a hybrid's ring skips hops too).
  void new_tokens(TokenTags tags, int64_t n, int64_t window) override;
  static void check_degree(int64_t cp, int64_t H, int64_t KV);  // throws the message above
  // KV heads per rank of an n-rank group (1 when replicated), and how many ranks hold each.
  static int64_t kv_heads(int64_t n, int64_t KV) { return KV >= n ? KV / n : 1; }
  static int64_t kv_replicas(int64_t n, int64_t KV) { return KV >= n ? 1 : n / KV; }
  // "" or the start-up line saying KV heads are replicated and what it costs.
  static std::string replication_note(int64_t n, int64_t H, int64_t KV, const char* who);
  // What the buffers below take, for the memory estimate made before any is allocated:
  // plain Ulysses (buffer_bytes), or the all-to-alls' own alone, without the inner op's
  // (exchange_bytes; n is the group's size).
  static double buffer_bytes(int n, int64_t Tl, int64_t H, int64_t KV, int64_t D,
                             Precision activations);
  static double exchange_bytes(int n, int64_t Tl, int64_t H, int64_t KV, int64_t D,
                               Precision activations);
  // The size of every buffer below: the constructor allocates these; exchange_bytes is their
  // sum plus room for MPI's own all-to-all copies of send_ and recv_ when n > 1.
  struct Sizes {
    size_t q, kv;    // elements, whole sequence: q_, o_x_, dout_ (type X), o_, dq_ (fp32); k_, v_, dk_, dv_
    size_t lse;      // floats: lse_
    size_t staging;  // bytes of send_ and recv_ each: a rank's whole q rows, fp32
    size_t tokens;   // int32 idx_ and doc_ each
    size_t elem;     // bytes of an activation
    double total() const {
      return double(elem) * double(3 * q + 2 * kv) + 4.0 * double(2 * q + 2 * kv + lse) +
             2.0 * double(staging) + 8.0 * double(tokens);
    }
  };
  static Sizes sizes(int n, int64_t Tl, int64_t H, int64_t KV, int64_t D, Precision activations);
  double allocated_bytes() const;  // what this instance's buffers take, read from them

 private:
  // [Tl, n/rep x w] rows of this rank -> [n x Tl, w] of its group: rank j gets column block
  // j / rep (rep ranks share a block: replicated KV heads), through `send`; returns the
  // received rows.
  template <class T>
  T* to_heads(const T* rows, int64_t Tl, int64_t w, T* out, int64_t rep = 1);
  // The inverse: [n x Tl, w] of this rank's group -> its [Tl, n/rep x w] rows, added into
  // `rows` (add: the rep ranks of a block sum there) or stored.
  template <class T>
  void to_tokens(const T* full, int64_t Tl, int64_t w, T* rows, bool add, int64_t rep = 1);
  void alltoall(const void* send, void* recv, size_t bytes_per_rank);
  void gather_tags(TokenTags tags, int64_t Tl);
  AttnDims gathered(const AttnDims& d, int64_t S) const;

  MPI_Comm comm_;
  int n_, rank_;
  int64_t Hc_, KVc_, rep_, D_;
  size_t bytes_sent_ = 0;
  std::unique_ptr<AttentionOp> inner_;
  Buffer<char> q_, k_, v_, o_x_, dout_;  // head-sharded inputs, whole sequence, type X
  Buffer<float> o_, lse_, dq_, dk_, dv_;  // head-sharded fp32, whole sequence
  Buffer<char> send_, recv_;             // staging for the all-to-alls
  Buffer<int32_t> idx_, doc_;            // [n x Tl] tags of the whole sequence
};

}  // namespace lct
