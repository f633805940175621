// ZeRO's stages as variants, each applied by its own piece, as torchtitan applies FSDP: what
// the model's weights live in, how a step's gradients are synchronised (train/grad_sync.hpp),
// and what that holds and moves (for the planner's memory and time model). A variant is one
// file of this folder plus one line in zero_variant.cpp's table.
#pragma once
#include <mpi.h>

#include <memory>
#include <vector>

#include "model/config.hpp"
#include "model/param_shards.hpp"
#include "model/params.hpp"
#include "train/grad_sync.hpp"

namespace lct {

// What a variant's cost depends on.
struct ZeroShape {
  const ModelConfig& config;
  const ParamLayout& layout;  // a rank's layout (its tp slices)
  int ranks;                  // the dp x cp ranks the gradients are summed over (>= 2)
  Precision wire;             // the gradients' precision on the wire
  double micro_batches;       // per step
  double whole_params_grads;  // bytes of the model's whole arrays (LlamaModel::memory)
};

// What one rank holds and sends for the variant's synchronisation, per step.
struct ZeroCost {
  double params_grads = 0;  // bytes of parameters and gradients held
  double scratch = 0;       // bytes the reduction holds besides them, MPI's scratch included
  double wire_bytes = 0;    // bytes leaving the rank (W - 1 of W parts of each collective)
  double messages = 0;      // collective rounds (the latency term)
  // The gradients' sum is one all-reduce of them all (MpiStepReducer::sum_gradients), which
  // --grad-reduce hierarchical runs inside the nodes and across them.
  bool all_reduce = false;
  // The model's activations and scratch are allocated only after start-up has let go of
  // the model file's whole weights (ZeRO-3), so start-up's peak does not add to them.
  bool allocates_after_startup = false;
};

struct ZeroVariant {
  int stage;
  const char* what;     // for the start-up table
  bool splits_moments;  // AdamW's moments split over the ranks
  // The store the model's weights live in (ZeRO-3's shards); null: the model's whole arrays.
  std::unique_ptr<ParamShards> (*weights)(MPI_Comm ranks, const ParamLayout& layout, const ModelConfig& config);
  // The step's synchronisation over `reducer`'s ranks; this rank is `rank` of `ranks`.
  std::unique_ptr<GradSync> (*sync)(LlamaModel& model, StepReducer* reducer, int ranks, int rank);
  ZeroCost (*cost)(const ZeroShape& shape);
};

// The variant of ZeRO `stage` (0..3) over `ranks` ranks: over fewer than 2 there is nothing
// to split, and every stage is the replicated one.
const ZeroVariant& zero_variant(int64_t stage, int64_t ranks);
std::vector<int64_t> zero_stages();  // the registered stages, in table order (what --zero takes)

// Costs shared by the variants: a collective of n floats' worth, W - 1 of W parts leaving.
double zero_part(const ZeroShape& s);            // (W - 1) / W x the rank's parameters
double wire_elem(const ZeroShape& s);            // bytes of a gradient on the wire

}  // namespace lct
