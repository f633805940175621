// What a parallel layout costs before anything runs: the memory of one rank (the estimate
// behind the start-up table, `train --dry-run` and `lctrain plan`) and the time of one
// training step, predicted from per-core compute rates and link rates measured on this
// machine (or given). One model, so that what `plan` ranks is what `train` checks.
#pragma once
#include <cstdint>
#include <string>

#include "model/config.hpp"
#include "model/llama.hpp"
#include "parallel/parallel_plan.hpp"

namespace lct {

// One way of running a step: the parallel plan and the other train flags that decide cost.
// Ranks are laid out tp innermost, then cp, then dp (mesh.hpp): a cp group spans nodes only
// when cp exceeds the ranks of a node.
struct Layout {
  int64_t nodes = 1, ranks_per_node = 1, threads = 1;  // threads per rank
  ParallelPlan plan;                // dp x cp x tp = nodes x ranks_per_node
  double process_bytes = 0;         // the process itself (code, libraries, MPI): measured by the caller
  int64_t seq_len = 0;              // S
  int64_t micro_batch = 1;          // sequences per micro-batch of a dp replica (--batch-size)
  int64_t grad_accum = 1;           // micro-batches per step
  Checkpointing checkpointing = Checkpointing::None;
  Precision precision = Precision::Fp32;
  bool optimizer_offloaded = false; // --offload-optimizer: the moments stream from a tier
  bool master_offloaded = false;    // --offload-master-weights: and the fp32 master (bf16)
  int64_t mlp_tile = 0;             // --mlp-tile (0: untiled)
  // --offload-activations: the first offload_layers layers' sets (offload_set_bytes each) go
  // to a tier that moves tier_gbs GB/s per node (its ranks share it); the optimizer's tier
  // (where offloaded) moves at that rate too.
  int64_t offload_layers = 0;
  double offload_set_bytes = 0, tier_gbs = 0;
  int64_t world() const { return nodes * ranks_per_node; }
  int64_t local_tokens() const { return micro_batch * seq_len / plan.cp; }  // T of one rank's micro-batch
  int64_t replicas() const { return world() / plan.tp; }  // the dp x cp ranks gradients are summed over
  int64_t ranks_sharing_state() const;                      // over which the AdamW moments split
};

// Bytes of one rank, by what holds them.
struct RankMemory {
  double params_grads = 0;  // fp32 parameters and gradients (+ the bf16 copy)
  double optimizer = 0;     // AdamW moments (this rank's share)
  double activations = 0;   // kept for the backward pass, under the checkpointing policy
  double batches = 0;       // the step's micro-batches (token ids, targets, tags)
  double scratch = 0;       // workspaces, and the cp attention's buffers
  double transient = 0;     // held at start-up beyond what a step holds: the model file's
                            // weights (and under tp their slices) before the moments exist
  double process = 0;       // Layout::process_bytes
  double offloaded = 0;     // activations on --offload-activations' tier: not in memory, not in total()
  double optimizer_offloaded = 0;  // AdamW moments on --offload-optimizer's tier (optimizer: its window)
  double master_offloaded = 0;     // the fp32 master weights on that tier (params_grads: their window)
  double total() const { return params_grads + optimizer + activations + batches + scratch + transient + process; }
};

RankMemory estimate_rank_memory(const ModelConfig& mc, const ModelShape& shape, const Layout& l);

// What one core does per second, and what links move, from which a step's time follows.
// Compute is measured on `threads` threads and assumed to scale with the threads of a rank.
struct Rates {
  int threads = 1;                // threads the seconds below were measured on
  double layer_token_s = 0;       // one layer, everything but attention, forward+backward, per token
  double layer_fwd_share = 0;     // forward's part of layer_token_s (recomputation costs it)
  double head_token_s = 0;        // embedding, final norm, LM head and loss, fwd+bwd, per token
  double attn_pair_s = 0;         // attention of one layer (all heads), fwd+bwd, per visible pair
  double attn_fwd_share = 0;      // forward's part of attn_pair_s
  double adam_param_s = 0;        // AdamW update (clipping included) per parameter
  double intra_gbs = 0;           // GB/s of one copy between ranks of a node (CPU work)
  double inter_gbs = 0;           // GB/s of a node's network link (shared by its ranks)
  double inter_latency_s = 0;     // per message across nodes
  std::string how;                // where the figures come from, for people
};

// A step's predicted time and traffic per rank.
struct StepPrediction {
  double compute_s = 0;        // forward, backward and recomputation of this rank's tokens
  double cp_bytes = 0;         // sent by one rank per step for context parallelism
  double cp_exposed_s = 0;     // its time not hidden behind attention
  double grad_bytes = 0;       // sent by one rank per step to sum gradients (and gather params)
  double grad_s = 0;           // not overlapped: it follows the backward pass
  double tp_bytes = 0;         // sent by one rank per step for tensor parallelism (all-reduces)
  double tp_s = 0;             // not overlapped: each all-reduce blocks the pass
  double optimizer_s = 0;      // AdamW over this rank's share of the parameters
  double offload_bytes = 0;    // activations a rank saves to and loads from its tier per step
  double offload_s = 0;        // the part of their moves that the layers' compute does not hide
  double step_s() const { return compute_s + cp_exposed_s + grad_s + tp_s + optimizer_s + offload_s; }
};

// Rates for a rank of `threads` threads from rates measured on one thread and on many: the
// core-seconds of each piece of work interpolated in log2(threads) between the two (a
// threaded kernel loses some per core; the links are the same).
Rates rates_for_threads(const Rates& one, const Rates& many, int threads);

// Query-key pairs one sequence of S tokens leaves visible (causal; window W > 0 limits it).
double sequence_pairs(int64_t S, int64_t window);

StepPrediction predict_step(const ModelConfig& mc, const Layout& l, const Rates& r);

// Seconds of one layer's forward and backward pass (recomputation included) of one
// micro-batch on a rank of the layout: what hides a set's move to and from the tier.
struct LayerSeconds {
  double forward = 0, backward = 0;
};
LayerSeconds layer_seconds(const ModelConfig& mc, const Layout& l, const Rates& r);
// Seconds of one move (save or load) of a set of `bytes` at the layout's tier rate per rank.
double tier_move_s(const Layout& l, double bytes);

}  // namespace lct
