#include "train/trainer.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"

namespace lct {

Trainer::Trainer(LlamaModel& model, const AdamWConfig& config, StepReducer* reducer, int shards, int shard)
    : model_(model), bounds_(shard_bounds(model.layout().total, shards)),
      opt_(model.layout(), config,
           shards > 1 ? Shard{bounds_[size_t(shard)], bounds_[size_t(shard) + 1]} : Shard{}),
      reducer_(reducer) {
  if (shards > 1 && (!reducer || shard < 0 || shard >= shards))
    fail("a sharded optimizer needs the ranks' reducer and a shard index below ", shards);
}

void Trainer::gather_moments(float* m, float* v) {
  if (!sharded()) fail("gather_moments: the moments are whole already (optimizer().m(), v())");
  reducer_->gather_shards(opt_.m(), m, bounds_);
  reducer_->gather_shards(opt_.v(), v, bounds_);
}

void Trainer::load_moments(const float* m, const float* v) {
  const Shard& s = opt_.shard();
  std::copy(m + s.begin, m + s.end, opt_.m());
  std::copy(v + s.begin, v + s.end, opt_.v());
}

StepStats Trainer::train_step(const std::vector<Batch>& micro_batches, int64_t step,
                              PhaseClock& clock) {
  StepStats s;
  s.step = step;
  for (const Batch& b : micro_batches) {
    s.valid_targets += b.valid_targets();
    s.target_weight += b.target_weight();
    s.real_tokens += b.real_tokens();
  }
  if (reducer_) {  // the step's loss is the mean over every rank's targets
    s.valid_targets = reducer_->sum(s.valid_targets);
    s.target_weight = reducer_->sum(s.target_weight);
    s.real_tokens = reducer_->sum(s.real_tokens);
    clock.lap(Phase::Allreduce);
  }
  // Normalise by the whole step's summed target weights (its valid targets when unweighted:
  // integers, exact in double and in the sums over ranks), never by per-micro-batch means.
  const float grad_scale = s.target_weight > 0 ? 1.0f / float(s.target_weight) : 0.0f;
  model_.zero_grads();
  clock.lap(Phase::Other);
  double loss_sum = 0;
  for (const Batch& b : micro_batches) loss_sum += model_.forward_backward(b, grad_scale, clock);
  if (reducer_) {  // gradients of replicated parameters: summed over every rank
    reducer_->sum_gradients(model_.grads(), model_.layout().total);
    loss_sum = reducer_->sum(loss_sum);
    clock.lap(Phase::Allreduce);
  }
  s.loss = s.target_weight > 0 ? loss_sum / s.target_weight : 0.0;

  s.grad_norm = global_norm(model_.grads(), model_.layout().total);
  s.lr = learning_rate(opt_.config(), step);
  s.skipped = !std::isfinite(s.loss) || !std::isfinite(s.grad_norm);
  if (!s.skipped) {
    const double clip = opt_.config().grad_clip;
    const double mult = clip > 0 ? std::min(1.0, clip / (s.grad_norm + 1e-6)) : 1.0;
    opt_.step(model_.params(), model_.grads(), step, s.lr, mult);
    if (sharded()) {  // every rank's updated range to every rank
      clock.lap(Phase::Optimizer);
      reducer_->gather_shards(model_.params(), bounds_);
      clock.lap(Phase::Allreduce);
    }
  }
  clock.lap(Phase::Optimizer);
  return s;
}

}  // namespace lct
