// One parallel plan of a run: how its ranks are laid out (dp x cp x tp, tp innermost: mesh.hpp)
// and how each parallelism is applied (sequence parallelism with tp, the ZeRO stage, the cp
// attention's algorithm, split and transport). app/ builds it once from the options, checks
// it once against the model, and hands the same plan to everything that needs one: the mesh,
// the cp attention's factory (cp_attention.hpp), the memory and time model
// (layout_model.hpp), the checkpoint's record of the run (io/checkpoint.hpp). No MPI here:
// `plan` reasons about layouts it never runs.
#pragma once
#include <cstdint>
#include <string>

#include "common/bf16.hpp"
#include "common/error.hpp"
#include "model/config.hpp"
#include "model/shard.hpp"

namespace lct {

// How a cp group computes attention (parallel/ring_attention.hpp, ulysses_attention.hpp,
// hybrid_attention.hpp).
enum class CpAlgo { Ring, AllGather, Ulysses, Hybrid };
inline constexpr CpAlgo kCpAlgos[] = {CpAlgo::Ring, CpAlgo::AllGather, CpAlgo::Ulysses, CpAlgo::Hybrid};  // as --help lists them
// How ring blocks travel: MPI two-sided, a node's shared-memory window, or shm where it can.
enum class CpTransport { Mpi, Shm, Auto };
// How sequences are cut over the cp ranks; Auto picks per model and length (split_for).
enum class CpSplitChoice { Auto, Zigzag, Contiguous };
// How the gradient all-reduce runs (parallel/reducer.hpp): one flat collective over every
// replica, or hierarchical: inside each node, then across the nodes, then inside again,
// wherever the replicas sit on several nodes with several on each (elsewhere: flat).
enum class GradReduce { Hierarchical, Flat };
// Where a step's tokens go on the dp x cp ranks (model/balance.hpp): placed by their
// attention work, documents spread over ranks where that evens them out, or each dp rank's
// own sequences cut by the cp split (none).
enum class Balance { Cost, None };

const char* cp_algo_name(CpAlgo a);             // "ring", "allgather", "ulysses", "hybrid"
const char* cp_transport_name(CpTransport t);   // "mpi", "shm", "auto"
const char* cp_split_choice_name(CpSplitChoice s);
const char* grad_reduce_name(GradReduce g);     // "hierarchical", "flat"
const char* balance_name(Balance b);            // "cost", "none"

// A layout rule a plan breaks, so that callers can tell them apart (`plan` counts them).
enum class PlanRule {
  None,
  TpSplit,                    // heads, KV heads, intermediate size or vocabulary not divisible by tp
  SequenceParallelWithoutTp,
  Zero3WithSequenceParallel,
  Zero3NotFp32,
  UlyssesHeads,               // Ulysses: heads not split by cp
  UlyssesDegreeWithoutHybrid,
  HybridWithoutDegree,
  HybridDegree,               // hybrid: U does not divide cp, or does not split the heads
  SeqLenSplit,                // a length the zigzag split cannot cut into 2 x cp chunks
  SequenceParallelTokens,     // a micro-batch's tokens not divisible by tp
};
struct PlanError : Error {
  PlanError(PlanRule r, const std::string& what) : Error(what), rule(r) {}
  PlanRule rule;
};

// Ulysses' head split over cp ranks, and hybrid's U (it divides cp and splits the heads; H
// and KV are a tp rank's): each throws a PlanError saying what would work.
void check_ulysses_heads(int64_t cp, int64_t H, int64_t KV);
void check_hybrid_degree(int64_t cp, int64_t U, int64_t H, int64_t KV);

struct ParallelPlan {
  int64_t dp = 1, cp = 1, tp = 1;
  bool sequence_parallel = false;  // with tp: the residual stream split by tokens (Megatron SP)
  int64_t zero = 0;                // ZeRO stage over the dp x cp ranks: 0 replicated ... 3 fully sharded
  CpAlgo cp_algo = CpAlgo::Ring;
  CpSplitChoice cp_split = CpSplitChoice::Auto;
  CpTransport cp_transport = CpTransport::Auto;
  int64_t ulysses_degree = 0;      // hybrid: U, the cp ranks of one all-to-all; 0 = not given
  GradReduce grad_reduce = GradReduce::Hierarchical;
  Balance balance = Balance::Cost;

  int64_t world() const { return dp * cp * tp; }
  int64_t replicas() const { return dp * cp; }  // ranks that sum gradients (a tp group sees the same tokens)
  // Whether every rank keeps its whole fp32 master between steps, which can then live on a
  // tier (--offload-master-weights): ZeRO's gather over several ranks rewrites it every step.
  bool keeps_whole_master() const { return zero == 0 || replicas() == 1; }
  // The ranks each sequence's shard is subdivided over (shard_indices' group): U under
  // hybrid, else 1. The ring then runs over cp / shard_group() positions.
  int64_t shard_group() const { return cp_algo == CpAlgo::Hybrid ? ulysses_degree : 1; }
  // The ranks of one Ulysses all-to-all: cp for Ulysses, U for hybrid, none (1) otherwise.
  int64_t ulysses_ranks() const { return cp_algo == CpAlgo::Ulysses ? cp : shard_group(); }
  // The split a sequence of `seq_len` tokens takes under this model's sliding window.
  CpSplit split_for(int64_t window, int64_t seq_len) const;
  // Whether steps place their tokens by work over the dp x cp ranks: --balance cost, the
  // ring (its plan follows any placement of the tokens) and more than one such rank.
  bool balances() const { return balance == Balance::Cost && cp_algo == CpAlgo::Ring && replicas() > 1; }
  // The ring that runs the micro-batches whose documents the balance spread over the dp x cp
  // ranks: cp = dp x cp, dp = 1 (with dp = 1, the cp group's own attention).
  ParallelPlan spread_plan() const;
  // "ring", "hybrid ulysses 2 x ring 2".
  std::string cp_description() const;

  // The first layout rule this plan breaks for the model and precision (None when it
  // breaks none), and the check that throws it as a PlanError saying how to fix it.
  PlanRule broken_rule(const ModelConfig& mc, Precision precision) const;
  void check(const ModelConfig& mc, Precision precision) const;
  // The same for a sequence length and the micro-batch it is trained in (`name`: how the
  // message calls the length: knob_name(Knob::SeqLen), or a curriculum stage's).
  PlanRule broken_rule(int64_t seq_len, int64_t micro_batch) const;
  void check(int64_t seq_len, int64_t micro_batch, const std::string& name) const;
};

}  // namespace lct
