// Step 3 of lctrain train: the objects a run is made of, each built by the piece of the plan
// it applies: the cp attention (cp_attention.hpp), the tp group, the ZeRO variant's weight
// store (ZeRO-3's shards), the model holding this rank's parameters, the reducer over the
// dp x cp replicas, and the trainer with the variant's gradient synchronisation. Built in this order, each referring to those before it; destroyed in reverse.
#pragma once
#include <iosfwd>
#include <memory>
#include <vector>

#include "app/cli/cli.hpp"
#include "app/training/train_inputs.hpp"
#include "io/checkpoint.hpp"
#include "model/attention_op.hpp"
#include "parallel/mesh.hpp"
#include "parallel/reducer.hpp"
#include "parallel/tp_comm_mpi.hpp"
#include "parallel/zero/zero_variant.hpp"
#include "train/trainer.hpp"

namespace lct {

struct TrainParts {
  ParamLayout local;            // this rank's layout: its tp slices (the whole layout without tp)
  TpSplit split;                // this rank's place in its tp group
  MPI_Comm replicas;            // the dp x cp ranks gradients are summed over (a tp group sees the same tokens)
  int replica_rank = 0, replica_count = 1;
  std::unique_ptr<AttentionOp> cp_attention;  // null when cp = 1
  // --balance cost over dp > 1: the ring over the dp x cp ranks that runs the micro-batches
  // whose documents are spread (model/balance.hpp); null otherwise (with dp = 1 the cp
  // group's attention runs them).
  std::unique_ptr<AttentionOp> spread_attention;
  AttentionOp* spread() const { return spread_attention ? spread_attention.get() : cp_attention.get(); }
  std::unique_ptr<MpiTpComm> tp_comm;
  const ZeroVariant* zero = nullptr;          // the ZeRO stage over the replicas (parallel/zero/)
  std::unique_ptr<ParamShards> shards;        // its weight store; null: the model's whole arrays
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<MpiStepReducer> reducer;
  std::unique_ptr<Trainer> trainer;

  // This rank's parameters out of whole ones of `whole` layout (the model file's, a
  // checkpoint's): its tp slices, then its ZeRO-3 shard of them, or into the model's.
  void take_params(const ParamLayout& whole, const float* whole_params);
  // The ranges of the AdamW moments this rank holds: its ZeRO-3 pieces, its ZeRO-1/2 range,
  // or `unsharded` (all of them, or none on a replica that does not write them).
  std::vector<Shard> moment_ranges(const std::vector<Shard>& unsharded) const;
  // Where a checkpoint is read into on this rank: its parameters (or ZeRO-3 pieces) and its
  // range or pieces of the AdamW moments, never a whole copy first (io/checkpoint.hpp).
  CheckpointTargets checkpoint_targets();
};

// Builds them from the plan and the inputs, printing the cp attention's start-up lines. The
// model file's whole weights (in.init.params) are handed to the model and released, before
// the moments are allocated (under ZeRO-3 before the model itself).
std::unique_ptr<TrainParts> build_train_parts(const TrainOptions& o, const ParallelPlan& plan, const Mesh& mesh,
                                              TrainInputs& in, std::ostream& out);

}  // namespace lct
