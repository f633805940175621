// One optimisation step over the micro-batches of a global batch: every micro-batch's
// forward and backward, loss normalised by the valid targets of the whole step, gradient
// clipping, AdamW. A step whose loss or gradient norm is not finite changes nothing.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/clock.hpp"
#include "model/llama.hpp"
#include "train/grad_sync.hpp"
#include "train/optimizer.hpp"

namespace lct {

struct StepStats {
  int64_t step = 0;          // 1-based, after this update
  double loss = 0;           // weighted mean over the step's targets (the plain mean unweighted)
  int64_t valid_targets = 0;
  double target_weight = 0;  // the summed loss weights of the targets (= valid_targets unweighted)
  int64_t real_tokens = 0;
  double grad_norm = 0;      // before clipping
  double lr = 0;
  bool skipped = false;      // non-finite loss or gradient: no update
};

// `sync` is how the gradients of the ranks become one update (train/grad_sync.hpp; ZeRO's
// stages: parallel/zero/); `reducer` sums the step's counts and loss over the same ranks
// (null on one rank). Without them: one rank, whole arrays.
class Trainer {
 public:
  Trainer(LlamaModel& model, const AdamWConfig& config, StepReducer* reducer = nullptr,
          std::unique_ptr<GradSync> sync = nullptr);
  // `step` is the 1-based number of the step being taken.
  StepStats train_step(const std::vector<Batch>& micro_batches, int64_t step, PhaseClock& clock);
  // Called once the step's forward and backward passes are done, before its gradients are
  // reduced and the weights move: the last moment at which the weights and moments are
  // those the step started from. A stop that abandons the step ends the process there
  // (app/training/step_start_save.hpp).
  void set_before_update(std::function<void()> f) { before_update_ = std::move(f); }
  AdamW& optimizer() { return opt_; }
  GradSync& sync() { return *sync_; }

 private:
  StepStats count_targets(const std::vector<Batch>& micro_batches, PhaseClock& clock);

  LlamaModel& model_;
  StepReducer* reducer_;
  std::unique_ptr<GradSync> sync_;
  AdamW opt_;
  std::function<void()> before_update_;
};

}  // namespace lct
