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
};

const Algorithm kAlgorithms[] = {
    {CpAlgo::Ring,
     [](const ParallelPlan& p, MPI_Comm c, const Heads& h, const ModelShape& s) -> std::unique_ptr<AttentionOp> {
       return std::make_unique<RingAttention>(c, h.tokens, h.H, h.KV, h.D, s.blocks, s.isa, s.precision,
                                              p.cp_transport);
     },
     [](const ParallelPlan&, const Heads& h, Precision e) {
       return RingAttention::buffer_bytes(h.tokens, h.H, h.KV, h.D, e);
     }},
    {CpAlgo::AllGather,
     [](const ParallelPlan&, MPI_Comm c, const Heads& h, const ModelShape& s) -> std::unique_ptr<AttentionOp> {
       return std::make_unique<AllGatherAttention>(c, h.tokens, h.H, h.KV, h.D, s.blocks, s.isa, s.precision);
     },
     [](const ParallelPlan& p, const Heads& h, Precision e) {
       return AllGatherAttention::buffer_bytes(int(p.cp), h.tokens, h.H, h.KV, h.D, e);
     }},
    {CpAlgo::Ulysses,
     [](const ParallelPlan&, MPI_Comm c, const Heads& h, const ModelShape& s) -> std::unique_ptr<AttentionOp> {
       return std::make_unique<UlyssesAttention>(c, h.tokens, h.H, h.KV, h.D, s.blocks, s.isa, s.precision);
     },
     [](const ParallelPlan& p, const Heads& h, Precision e) {
       return UlyssesAttention::buffer_bytes(int(p.cp), h.tokens, h.H, h.KV, h.D, e);
     }},
    {CpAlgo::Hybrid,
     [](const ParallelPlan& p, MPI_Comm c, const Heads& h, const ModelShape& s) -> std::unique_ptr<AttentionOp> {
       return std::make_unique<HybridAttention>(c, int(p.ulysses_degree), h.tokens, h.H, h.KV, h.D, s.blocks,
                                                s.isa, s.precision, p.cp_transport);
     },
     [](const ParallelPlan& p, const Heads& h, Precision e) {
       return HybridAttention::buffer_bytes(int(p.ulysses_degree), h.tokens, h.H, h.KV, h.D, e);
     }},
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

}  // namespace lct
