#include "train/trainer.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"

namespace lct {

Trainer::Trainer(LlamaModel& model, const AdamWConfig& config, StepReducer* reducer,
                 std::unique_ptr<GradSync> sync)
    : model_(model), reducer_(reducer),
      sync_(sync ? std::move(sync) : replicated_grad_sync(model, reducer)),
      opt_(sync_->optimizer(config)) {}

// The step's targets, weights and tokens, summed over every rank: the loss is the mean over
// all of them.
StepStats Trainer::count_targets(const std::vector<Batch>& micro_batches, PhaseClock& clock) {
  StepStats s;
  for (const Batch& b : micro_batches) {
    s.valid_targets += b.valid_targets();
    s.target_weight += b.target_weight();
    s.real_tokens += b.real_tokens();
  }
  if (reducer_) {
    s.valid_targets = reducer_->sum(s.valid_targets);
    s.target_weight = reducer_->sum(s.target_weight);
    s.real_tokens = reducer_->sum(s.real_tokens);
    clock.lap(Phase::Allreduce);
  }
  return s;
}

StepStats Trainer::train_step(const std::vector<Batch>& micro_batches, int64_t step,
                              PhaseClock& clock) {
  StepStats s = count_targets(micro_batches, clock);
  s.step = step;
  // Normalise by the whole step's summed target weights (its valid targets when unweighted:
  // integers, exact in double and in the sums over ranks), never by per-micro-batch means.
  const float grad_scale = s.target_weight > 0 ? 1.0f / float(s.target_weight) : 0.0f;
  model_.zero_grads();
  clock.lap(Phase::Other);
  double loss_sum = 0;
  for (const Batch& b : micro_batches) loss_sum += model_.forward_backward(b, grad_scale, clock);
  if (before_update_) before_update_();
  sync_->reduce(clock);
  if (reducer_) {
    loss_sum = reducer_->sum(loss_sum);
    clock.lap(Phase::Allreduce);
  }
  s.loss = s.target_weight > 0 ? loss_sum / s.target_weight : 0.0;
  s.grad_norm = sync_->norm(clock);
  s.lr = learning_rate(opt_.config(), step);
  s.skipped = !std::isfinite(s.loss) || !std::isfinite(s.grad_norm);
  if (!s.skipped) {  // a non-finite step changes nothing
    const double clip = opt_.config().grad_clip;
    const double mult = clip > 0 ? std::min(1.0, clip / (s.grad_norm + 1e-6)) : 1.0;
    opt_.step(sync_->params(), sync_->grads(), step, s.lr, mult);
    sync_->after_update(clock);
  }
  clock.lap(Phase::Optimizer);
  return s;
}

}  // namespace lct
