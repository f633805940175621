#include "train/trainer.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"

namespace lct {

namespace {
AdamW make_optimizer(LlamaModel& model, const AdamWConfig& config, const std::vector<size_t>& bounds,
                     int shard, int stage) {
  if (stage == 3) {
    if (!model.param_shards()) fail("ZeRO-3 needs a model built over ParamShards");
    return AdamW(model.layout(), config, model.param_shards()->pieces());
  }
  return AdamW(model.layout(), config,
               bounds.size() > 2 ? Shard{bounds[size_t(shard)], bounds[size_t(shard) + 1]} : Shard{});
}
}  // namespace

Trainer::Trainer(LlamaModel& model, const AdamWConfig& config, StepReducer* reducer, int shards,
                 int shard, int stage)
    : model_(model), bounds_(shard_bounds(model.layout().total, stage == 3 ? 1 : shards)),
      stage_(shards > 1 ? stage : 0), shard_(shard),
      opt_(make_optimizer(model, config, bounds_, shard, stage_)), reducer_(reducer) {
  if (shards > 1 && (!reducer || shard < 0 || shard >= shards))
    fail("a sharded optimizer needs the ranks' reducer and a shard index below ", shards);
  if (stage < 0 || stage > 3) fail("ZeRO stage ", stage, ": use 0, 1, 2 or 3");
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
  // ZeRO-3: each unit's gradients are reduce-scattered inside the passes.
  for (const Batch& b : micro_batches) loss_sum += model_.forward_backward(b, grad_scale, clock);
  if (reducer_) {  // gradients of replicated parameters: summed over every rank
    if (stage_ == 2) reducer_->scatter_gradients(model_.grads(), bounds_);
    else if (stage_ < 2) reducer_->sum_gradients(model_.grads(), model_.layout().total);
    loss_sum = reducer_->sum(loss_sum);
    clock.lap(Phase::Allreduce);
  }
  s.loss = s.target_weight > 0 ? loss_sum / s.target_weight : 0.0;

  // This rank's (summed) gradients: whole, its range (2) or its shard (3).
  ParamShards* ps = model_.param_shards();
  float* params = stage_ == 3 ? ps->params() : model_.params();
  const float* grads = stage_ == 3 ? ps->grad_shard() : model_.grads();
  // Tensor parallelism: the squares of the tp group's slices summed over the group, the
  // replicated norm weights' counted once (tp rank 0's).
  TpComm* tp = model_.tp();
  auto squares = [&](size_t lo, size_t n) {
    if (!tp) return sum_squares(grads + lo, n);
    if (stage_ < 3) return tp_sum_squares(model_.layout(), grads, lo, lo + n, tp->rank() == 0);
    double s = 0;  // ZeRO-3: the shard's pieces, back to back
    size_t at = 0;
    for (const Shard& p : ps->pieces()) {
      s += tp_sum_squares(model_.layout(), grads + at, p.begin, p.end, tp->rank() == 0, p.begin);
      at += p.size();
    }
    return s;
  };
  if (stage_ >= 2) {  // the norm from every rank's part: one double each, added in rank order
    const size_t lo = stage_ == 2 ? bounds_[size_t(shard_)] : 0;
    const size_t n = stage_ == 2 ? bounds_[size_t(shard_) + 1] - lo : ps->size();
    const double sq = reducer_->sum_in_order(squares(lo, n));
    s.grad_norm = std::sqrt(tp ? tp->sum(sq) : sq);
    clock.lap(Phase::Allreduce);
  } else if (tp) {
    s.grad_norm = std::sqrt(tp->sum(squares(0, model_.layout().total)));
    clock.lap(Phase::Allreduce);
  } else {
    s.grad_norm = global_norm(grads, model_.layout().total);
  }
  s.lr = learning_rate(opt_.config(), step);
  s.skipped = !std::isfinite(s.loss) || !std::isfinite(s.grad_norm);
  if (!s.skipped) {
    const double clip = opt_.config().grad_clip;
    const double mult = clip > 0 ? std::min(1.0, clip / (s.grad_norm + 1e-6)) : 1.0;
    opt_.step(params, grads, step, s.lr, mult);
    if (stage_ == 1 || stage_ == 2) {  // every rank's updated range to every rank
      clock.lap(Phase::Optimizer);
      reducer_->gather_shards(model_.params(), bounds_);
      clock.lap(Phase::Allreduce);
    }
  }
  clock.lap(Phase::Optimizer);
  return s;
}

}  // namespace lct
