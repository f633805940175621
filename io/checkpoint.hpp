// Checkpoints: the model-file schema (so a checkpoint is accepted wherever a model file is)
// plus the AdamW moments under /optimizer/exp_avg/NAME and /optimizer/exp_avg_sq/NAME (the
// names torch.optim uses) and the training state as attributes of /train_state.
#pragma once
#include <string>

#include "common/provenance.hpp"
#include "model/params.hpp"
#include "train/state.hpp"

namespace lct {

struct CheckpointView {  // what to write; pointers into the live buffers
  const ModelConfig* config;
  const ParamLayout* layout;
  const float* params;
  const float* exp_avg;
  const float* exp_avg_sq;
  TrainState state;
};

void write_checkpoint(const std::string& path, const CheckpointView& c, const Provenance& prov);

// Reads into buffers of `layout` size; verifies kind, version, config (equal to `expected`)
// and every shape.
TrainState read_checkpoint(const std::string& path, const ModelConfig& expected,
                           const ParamLayout& layout, float* params, float* exp_avg,
                           float* exp_avg_sq);

}  // namespace lct
