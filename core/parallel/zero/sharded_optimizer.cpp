// ZeRO stages 1 and 2: the AdamW moments split over the ranks. Each rank updates its range
// of the parameters (shard_bounds), then every rank gathers the others' ranges: the same
// bits as unsharded.
//   1: the gradients are all-reduced whole.
//   2: they are reduce-scattered, each rank receiving the sum of its range only, and the
//      norm is summed from the ranges. The whole gradient buffer still exists during the
//      backward (it is the model's): the memory saved is the moments', as in 1; what changes
//      is the communication (no all-reduce).
#include <cmath>

#include "parallel/reducer.hpp"
#include "parallel/zero/zero_variant.hpp"

namespace lct {

namespace {

class ShardedMoments : public GradSync {
 public:
  ShardedMoments(LlamaModel& model, StepReducer& reducer, int ranks, int rank)
      : model_(model), reducer_(reducer), bounds_(shard_bounds(model.layout().total, ranks)),
        mine_{bounds_[size_t(rank)], bounds_[size_t(rank) + 1]} {}
  AdamW optimizer(const AdamWConfig& c) const override { return AdamW(model_.layout(), c, mine_); }
  std::vector<Shard> moment_ranges() const override { return {mine_}; }
  float* params() override { return model_.params(); }
  const float* grads() override { return model_.grads(); }
  void reduce(PhaseClock& clock) override {
    reducer_.sum_gradients(model_.grads(), model_.layout().total);
    clock.lap(Phase::Allreduce);
  }
  double norm(PhaseClock& clock) override { return whole_gradient_norm(model_, clock); }
  void after_update(PhaseClock& clock) override {  // every rank's updated range to every rank
    clock.lap(Phase::Optimizer);
    reducer_.gather_shards(model_.params(), bounds_);
    clock.lap(Phase::Allreduce);
  }

 protected:
  LlamaModel& model_;
  StepReducer& reducer_;
  std::vector<size_t> bounds_;  // every rank's range
  Shard mine_;
};

class ShardedGradients final : public ShardedMoments {
 public:
  using ShardedMoments::ShardedMoments;
  void reduce(PhaseClock& clock) override {
    reducer_.scatter_gradients(model_.grads(), bounds_);
    clock.lap(Phase::Allreduce);
  }
  double norm(PhaseClock& clock) override {  // one double per rank, added in rank order
    const double sq = reducer_.sum_in_order(gradient_squares(model_, model_.grads(), mine_.begin, mine_.size(), 0));
    clock.lap(Phase::Allreduce);
    return std::sqrt(tp_group_sum(model_, sq, clock));
  }
};

std::unique_ptr<GradSync> moments(LlamaModel& model, StepReducer* reducer, int ranks, int rank) {
  return std::make_unique<ShardedMoments>(model, *reducer, ranks, rank);
}
std::unique_ptr<GradSync> gradients(LlamaModel& model, StepReducer* reducer, int ranks, int rank) {
  return std::make_unique<ShardedGradients>(model, *reducer, ranks, rank);
}

// Stage 1: all-reduced, then the parameters gathered: 2 P e + P 4.
ZeroCost moments_cost(const ZeroShape& s) {
  ZeroCost c;
  c.params_grads = s.whole_params_grads;
  c.scratch = double(MpiStepReducer::allreduce_scratch_bytes(s.layout.total, s.wire));
  c.wire_bytes = 2 * zero_part(s) * wire_elem(s) + zero_part(s) * 4;
  c.messages = 2.0 * (s.ranks - 1);
  return c;
}
// Stage 2: reduce-scattered, then the parameters gathered: P e + P 4.
ZeroCost gradients_cost(const ZeroShape& s) {
  ZeroCost c = moments_cost(s);
  c.scratch = double(MpiStepReducer::reduce_scatter_scratch_bytes(s.layout.total, s.wire));
  c.wire_bytes = zero_part(s) * wire_elem(s) + zero_part(s) * 4;
  return c;
}

}  // namespace

extern const ZeroVariant kShardedMoments{1, "AdamW moments split", true, nullptr, moments, moments_cost};
extern const ZeroVariant kShardedGradients{2, "moments split, gradients reduce-scattered", true, nullptr, gradients,
                                           gradients_cost};

}  // namespace lct
