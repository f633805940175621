// How a step's gradients, computed on every rank that holds a piece of the global batch,
// become one update: what ZeRO's stages differ in, as a strategy chosen once at start-up
// (parallel/zero/zero_variant.hpp), so that the step reads the same for every stage:
//   reduce -> norm -> (clip) -> AdamW on params()/grads() -> after_update.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "common/clock.hpp"
#include "model/llama.hpp"
#include "train/optimizer.hpp"

namespace lct {

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
  // The sum over the ranks of every rank's range [bounds[r], bounds[r + 1]) of g, into that
  // rank's range of its g (a reduce-scatter); the rest of g is left as it was.
  virtual void scatter_gradients(float* g, const std::vector<size_t>& bounds) = 0;
  // The sum of one value per rank, added in rank order: the same bits on every rank.
  virtual double sum_in_order(double local) = 0;
};

class GradSync {
 public:
  virtual ~GradSync() = default;
  // AdamW with moments for what this rank updates.
  virtual AdamW optimizer(const AdamWConfig& config) const = 0;
  // The ranges of the flat layout whose moments this rank holds, in the order it holds them:
  // what a checkpoint writes and a resume reads of the moments.
  virtual std::vector<Shard> moment_ranges() const = 0;
  // What AdamW updates: the whole arrays, or this rank's share of them.
  virtual float* params() = 0;
  virtual const float* grads() = 0;
  // After the step's last backward: the gradients summed over the ranks, as far as this
  // rank needs them.
  virtual void reduce(PhaseClock& clock) = 0;
  // The L2 norm of the whole summed gradient, the same bits on every rank.
  virtual double norm(PhaseClock& clock) = 0;
  // After AdamW: the updated parameters wherever the other ranks need them.
  virtual void after_update(PhaseClock& clock) = 0;
};

// Every rank holds and updates the whole arrays; the gradients are all-reduced (`reducer`
// null: one rank, nothing to sum). ZeRO stage 0, and any stage over one replica.
std::unique_ptr<GradSync> replicated_grad_sync(LlamaModel& model, StepReducer* reducer);

// Sum of squares of g over the layout's entries [lo, lo + n), g[0] holding entry `base`
// (base = lo for a contiguous range). Tensor parallelism: a tp group holds the same norm
// weights, so only tp rank 0 counts them, and the group's sums are added (with a lap of
// `clock` as communication).
double gradient_squares(const LlamaModel& model, const float* g, size_t lo, size_t n, size_t base);
double tp_group_sum(const LlamaModel& model, double squares, PhaseClock& clock);
// The norm of the model's whole gradient array, summed on every rank alike.
double whole_gradient_norm(LlamaModel& model, PhaseClock& clock);

}  // namespace lct
