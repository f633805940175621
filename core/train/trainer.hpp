// One optimisation step over the micro-batches of a global batch: every micro-batch's
// forward and backward, loss normalised by the valid targets of the whole step, gradient
// clipping, AdamW. A step whose loss or gradient norm is not finite changes nothing.
#pragma once
#include <cstdint>
#include <vector>

#include "common/clock.hpp"
#include "model/llama.hpp"
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

// Sums across the ranks that hold pieces of the batch (dp x cp; the ranks of a tp group hold
// the same pieces and are not summed over); absent on one rank.
class StepReducer {
 public:
  virtual ~StepReducer() = default;
  virtual int64_t sum(int64_t local) = 0;
  virtual double sum(double local) = 0;
  virtual void sum_gradients(float* grads, size_t n) = 0;
  // Every rank's range [bounds[r], bounds[r + 1]) of x, from that rank, to every rank, in place.
  virtual void gather_shards(float* x, const std::vector<size_t>& bounds) = 0;
  // ZeRO-2: the sum over the ranks of every rank's range [bounds[r], bounds[r + 1]) of g,
  // into that rank's range of its g (a reduce-scatter); the rest of g is left as it was.
  virtual void scatter_gradients(float* g, const std::vector<size_t>& bounds) = 0;
  // The sum of one value per rank, added in rank order: the same bits on every rank.
  virtual double sum_in_order(double local) = 0;
};

// `shards` > 1: the ZeRO `stage`'s state is split over that many ranks of the reducer (this
// rank's index `shard`).
//   1: the AdamW moments. Gradients are all-reduced whole; each rank updates its range of
//      the parameters, then every rank gathers the others' (the same bits as unsharded).
//   2: as 1, but the gradients are reduce-scattered: each rank receives the sum of its
//      range only, and the gradient norm is summed from the ranges. The whole-size
//      gradient buffer still exists during backward (it is the model's): the memory saved
//      is the optimizer state's, as in 1; what changes is the communication (no all-reduce).
//   3: the model's ParamShards (model.param_shards()) hold the parameters and gradients,
//      a piece of every unit per rank; the passes gather and reduce-scatter unit by unit,
//      and AdamW updates the shard in place (nothing to gather after the step).
class Trainer {
 public:
  Trainer(LlamaModel& model, const AdamWConfig& config, StepReducer* reducer = nullptr,
          int shards = 1, int shard = 0, int stage = 1);
  // `step` is the 1-based number of the step being taken.
  StepStats train_step(const std::vector<Batch>& micro_batches, int64_t step, PhaseClock& clock);
  AdamW& optimizer() { return opt_; }
  bool sharded() const { return bounds_.size() > 2 || stage_ == 3; }
  int stage() const { return stage_; }

 private:
  LlamaModel& model_;
  std::vector<size_t> bounds_;  // shard_bounds over the ranks; {0, total} unsharded
  int stage_, shard_;
  AdamW opt_;
  StepReducer* reducer_;
};

}  // namespace lct
