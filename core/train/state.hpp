// Everything besides weights and optimiser moments that a resumed run needs.
#pragma once
#include <cstdint>
#include <string>

#include "data/dataset.hpp"
#include "data/packing.hpp"

namespace lct {

// The file a run was initialised from (train --model): its path, and for a checkpoint its
// step, lineage and data; recorded in every checkpoint of the run (and kept by resumes).
struct InitOrigin {
  std::string path;
  int64_t step = 0;    // 0: a model file
  std::string run_id;  // "" for a model file
  DataIdentity data;   // empty for a model file
};

struct TrainState {
  int64_t step = 0;         // updates done
  int64_t data_epoch = 0;   // where the data loader stands
  int64_t data_cursor = 0;
  int64_t data_seed = 0;
  int64_t tokens_seen = 0;  // real (non-padding) tokens trained on
  int64_t restarts = 0;     // how many times the run was resumed
  int64_t skipped_steps = 0;      // updates skipped for a non-finite loss or gradient
  int64_t consecutive_skips = 0;  // of those, how many in a row up to `step`
  // The run's lineage: drawn at a fresh start, kept by every resume, so that a run
  // directory's checkpoints of another run are never taken for this one's.
  std::string run_id;
  DataIdentity data;  // what the run trains on
  InitOrigin init_from;
  // The tokenizer that made the data's ids (its model included): a resume on data of
  // another tokenizer is refused, and the checkpoint alone can decode ids. No name when
  // the checkpoint predates it.
  TokenizerInfo tokenizer;
  // The packing rule the data order was drawn under (data/packing.hpp); 1 for checkpoints
  // from before rules were recorded.
  int64_t packing_rule = kPackingRule;
  // The attention path it trained with ("fused", "onednn": kernels/attention_kernel.hpp); a
  // resume takes it again. "" for checkpoints from before it was recorded.
  std::string attention_kernel;
};

// A new lineage id: 16 random hex digits.
std::string new_run_id();

}  // namespace lct
