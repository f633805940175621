// The attention of a context-parallel group, made from the run's plan: one factory for
// train, eval and the memory model, so that what runs is what was estimated. Each algorithm
// is one entry of the table in cp_attention.cpp (its op's constructor and the bytes its
// buffers take); adding one is its own file plus that entry and a CpAlgo value.
#pragma once
#include <mpi.h>

#include <memory>

#include "model/attention_op.hpp"
#include "model/config.hpp"
#include "model/llama.hpp"
#include "parallel/parallel_plan.hpp"

namespace lct {

// The op over the cp communicator `cp` (plan.cp ranks; null when plan.cp = 1), for the heads
// of one tp rank (the model's heads / plan.tp), on micro-batches of shape.max_tokens tokens.
std::unique_ptr<AttentionOp> make_cp_attention(const ParallelPlan& plan, MPI_Comm cp, const ModelConfig& mc,
                                               const ModelShape& shape);

// What that op's buffers take, without making it (0 when plan.cp = 1). `local_tokens`: a
// rank's micro-batch.
double cp_attention_bytes(const ParallelPlan& plan, const ModelConfig& mc, int64_t local_tokens,
                          Precision activations);

// What the op sends per layer of one micro-batch (forward and backward), for the step's time
// model: bytes leaving a rank, the messages they take (the latency term), and whether the
// network moves them while attention computes (a ring's hops across nodes). `recompute`:
// a checkpointing policy runs the attention forward again. Zero where not modelled.
struct CpTraffic {
  double bytes = 0, messages = 0;
  bool overlaps_attention = false;
};
CpTraffic cp_attention_traffic(const ParallelPlan& plan, const ModelConfig& mc, int64_t local_tokens,
                               Precision activations, bool recompute);

}  // namespace lct
