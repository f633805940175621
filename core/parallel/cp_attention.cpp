#include "parallel/cp_attention.hpp"

#include "parallel/hybrid_attention.hpp"
#include "parallel/ring_attention.hpp"
#include "parallel/ulysses_attention.hpp"

namespace lct {

namespace {

// A tp rank's part of the attention: its heads, on micro-batches of `tokens` tokens.
struct Heads {
  int64_t tokens, H, KV, D;
};

struct Algorithm {
  CpAlgo algo;
  std::unique_ptr<AttentionOp> (*make)(const ParallelPlan&, MPI_Comm, const Heads&, const ModelShape&);
  double (*bytes)(const ParallelPlan&, const Heads&, Precision);
  CpTraffic (*traffic)(const ParallelPlan&, const Heads&, double elem, bool recompute);
};

// The ring: forward, K|V (+ int32 idx and doc tags) make cp - 1 hops; backward, the same plus
// the fp32 dK|dV travelling with them and one hop home; a recomputed forward repeats the
// forward's hops. Across nodes the network moves a hop while the block in hand is computed.
CpTraffic ring_traffic(const ParallelPlan& p, const Heads& h, double e, bool recompute) {
  const double n = double(p.cp), Tl = double(h.tokens), KV = double(h.KV), D = double(h.D);
  const double kv = Tl * (2 * KV * D * e + 8), dkv = Tl * 2 * KV * D * 4;
  const double fwd_hops = (n - 1) * (recompute ? 2 : 1);
  return {fwd_hops * kv + (n - 1) * (kv + dkv) + dkv, fwd_hops + n, true};
}

// Ulysses: forward, q, k, v to the head split and o back, (n - 1) / n of each leaving the
// rank; backward, dout, q, k, v, o in and dq, dk, dv (fp32) out, about twice that. The
// all-to-alls block.
CpTraffic ulysses_traffic(const ParallelPlan& p, const Heads& h, double e, bool recompute) {
  const double n = double(p.cp), Tl = double(h.tokens), H = double(h.H), KV = double(h.KV), D = double(h.D);
  const double fwd = Tl * (2 * H + 2 * KV) * D * e * (n - 1) / n;
  const double bwd = Tl * ((3 * H + 2 * KV) * D * e + (H + 2 * KV) * D * 4) * (n - 1) / n;
  return {fwd * (recompute ? 2 : 1) + bwd, 8 * (n - 1), false};
}

// allgather and hybrid are not modelled: their traffic lies between the ring's and Ulysses'.
CpTraffic not_modelled(const ParallelPlan&, const Heads&, double, bool) { return {}; }

const Algorithm kAlgorithms[] = {
    {CpAlgo::Ring,
     [](const ParallelPlan& p, MPI_Comm c, const Heads& h, const ModelShape& s) -> std::unique_ptr<AttentionOp> {
       return std::make_unique<RingAttention>(c, h.tokens, h.H, h.KV, h.D, s.blocks, s.isa, s.precision,
                                              p.cp_transport);
     },
     [](const ParallelPlan&, const Heads& h, Precision e) {
       return RingAttention::buffer_bytes(h.tokens, h.H, h.KV, h.D, e);
     },
     ring_traffic},
    {CpAlgo::AllGather,
     [](const ParallelPlan&, MPI_Comm c, const Heads& h, const ModelShape& s) -> std::unique_ptr<AttentionOp> {
       return std::make_unique<AllGatherAttention>(c, h.tokens, h.H, h.KV, h.D, s.blocks, s.isa, s.precision);
     },
     [](const ParallelPlan& p, const Heads& h, Precision e) {
       return AllGatherAttention::buffer_bytes(int(p.cp), h.tokens, h.H, h.KV, h.D, e);
     },
     not_modelled},
    {CpAlgo::Ulysses,
     [](const ParallelPlan&, MPI_Comm c, const Heads& h, const ModelShape& s) -> std::unique_ptr<AttentionOp> {
       return std::make_unique<UlyssesAttention>(c, h.tokens, h.H, h.KV, h.D, s.blocks, s.isa, s.precision);
     },
     [](const ParallelPlan& p, const Heads& h, Precision e) {
       return UlyssesAttention::buffer_bytes(int(p.cp), h.tokens, h.H, h.KV, h.D, e);
     },
     ulysses_traffic},
    {CpAlgo::Hybrid,
     [](const ParallelPlan& p, MPI_Comm c, const Heads& h, const ModelShape& s) -> std::unique_ptr<AttentionOp> {
       return std::make_unique<HybridAttention>(c, int(p.ulysses_degree), h.tokens, h.H, h.KV, h.D, s.blocks,
                                                s.isa, s.precision, p.cp_transport);
     },
     [](const ParallelPlan& p, const Heads& h, Precision e) {
       return HybridAttention::buffer_bytes(int(p.ulysses_degree), h.tokens, h.H, h.KV, h.D, e);
     },
     not_modelled},
};

const Algorithm& algorithm(CpAlgo a) {
  for (const Algorithm& x : kAlgorithms)
    if (x.algo == a) return x;
  fail("no cp attention is registered for '", cp_algo_name(a), "'");
}

Heads heads_of(const ParallelPlan& p, const ModelConfig& mc, int64_t tokens) {
  return {tokens, mc.num_attention_heads / p.tp, mc.num_key_value_heads / p.tp, mc.head_dim()};
}

}  // namespace

std::unique_ptr<AttentionOp> make_cp_attention(const ParallelPlan& plan, MPI_Comm cp, const ModelConfig& mc,
                                               const ModelShape& shape) {
  if (plan.cp == 1) return nullptr;
  return algorithm(plan.cp_algo).make(plan, cp, heads_of(plan, mc, shape.max_tokens), shape);
}

double cp_attention_bytes(const ParallelPlan& plan, const ModelConfig& mc, int64_t local_tokens,
                          Precision activations) {
  if (plan.cp == 1) return 0;
  return algorithm(plan.cp_algo).bytes(plan, heads_of(plan, mc, local_tokens), activations);
}

CpTraffic cp_attention_traffic(const ParallelPlan& plan, const ModelConfig& mc, int64_t local_tokens,
                               Precision activations, bool recompute) {
  if (plan.cp == 1) return {};
  const double e = activations == Precision::Bf16 ? 2.0 : 4.0;
  return algorithm(plan.cp_algo).traffic(plan, heads_of(plan, mc, local_tokens), e, recompute);
}

}  // namespace lct
