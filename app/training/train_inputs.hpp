// Step 1 of lctrain train: what it reads and checks before anything is allocated or written,
// alike on every rank: the model (its config with the --rope-* changes), the data and the
// held-out data (offsets and attributes: tokens are read step by step), the sequence-length
// schedule, where the weights come from, and the shape of a step.
#pragma once
#include <iosfwd>
#include <memory>
#include <optional>

#include "app/cli/cli.hpp"
#include "app/cli/context.hpp"
#include "app/training/curriculum.hpp"
#include "data/dataset.hpp"
#include "io/model_file.hpp"
#include "model/llama.hpp"
#include "parallel/parallel_plan.hpp"
#include "train/state.hpp"

namespace lct {

struct TrainInputs {
  ModelData init;                          // the model file's or checkpoint's weights, whole
  ModelConfig source_config;               // its config before --rope-*
  std::unique_ptr<TokenSource> dataset;    // --data
  std::unique_ptr<TokenSource> eval_data;  // --eval-data; null without --eval-every
  std::unique_ptr<SeqLenSchedule> schedule;
  std::optional<TrainState> source;        // when --model is a checkpoint
  InitOrigin origin;                       // where the weights come from
  Precision precision = Precision::Fp32;
  ModelShape shape{};                      // of one rank's micro-batch
  TierSpec optimizer_tier;                 // --offload-optimizer: where the AdamW moments live
  const ModelConfig& config() const { return init.config; }
};

// Reads and checks them all (check_inputs included); throws, alike on every rank, on the
// first problem. Prints the warnings about the data (loss weights) to `out`.
TrainInputs read_train_inputs(const Context& ctx, const ParallelPlan& plan, std::ostream& out);

// The start-up lines about them: a changed config, the checkpoint the weights come from, the
// schedule, and the model's size (under --tp, each rank's share).
void report_train_inputs(std::ostream& out, const TrainOptions& o, const ParallelPlan& plan,
                         const TrainInputs& in);

}  // namespace lct
