// Saving and resuming a training run. Both are collective over the world and agreed: a
// failure anywhere becomes the same AgreedError on every rank, and leaves every complete
// checkpoint of the run directory as it was.
#pragma once
#include <iosfwd>
#include <optional>
#include <string>

#include "io/checkpoint.hpp"
#include "io/run_dir.hpp"
#include "parallel/world.hpp"

namespace lct {

struct RetentionPolicy {
  int64_t keep_last = 2;   // newest checkpoints kept
  int64_t keep_every = 0;  // and every one whose step is a multiple of this (0: none)
};

// Writes the checkpoint of `c.state.step` (parallel HDF5, one file), then points `latest`
// at it and prunes by `keep`. `run` is rank 0's (null elsewhere).
void save_checkpoint(const World& w, RunDirectory* run, const std::string& run_dir,
                     const CheckpointView& c, const Provenance& prov, const RetentionPolicy& keep);

struct ResumeRequest {
  std::string how;      // "auto" (newest usable checkpoint in run_dir) or a checkpoint path
  std::string run_dir;
  const ModelConfig* config;
  const ParamLayout* layout;  // the whole (file) layout
  CheckpointTargets into;     // what this rank reads, where
  RunLayout run;
  RankState rank;
  bool attributes_only = false;  // --dry-run: the checks of a checkpoint that read no tensor
};

// Loads the checkpoint `req.how` names into `req.into`. With "auto", a damaged or
// unreadable checkpoint is reported and the previous one tried; nullopt when the run
// directory holds none (a fresh start). Throws AgreedError when nothing usable is found.
// *saved_layout: how the checkpoint's run was laid out (degrees, batch shape).
std::optional<TrainState> resume_checkpoint(const World& w, std::ostream& out,
                                            const ResumeRequest& req, std::string* used_path,
                                            RunLayout* saved_layout);

}  // namespace lct
