// ZeRO stage 3 (FSDP): the parameters and gradients live in shards (parallel/zero3.hpp),
// a piece of every unit per rank. The passes gather each unit before they compute with it
// and reduce-scatter its gradients just after, so nothing is left to sum after the backward;
// AdamW updates the shard in place, and nothing is gathered after the step.
#include <cmath>

#include "parallel/zero/zero_variant.hpp"
#include "common/error.hpp"
#include "parallel/zero3.hpp"

namespace lct {

namespace {

class FullySharded final : public GradSync {
 public:
  FullySharded(LlamaModel& model, StepReducer& reducer) : model_(model), shards_(*model.param_shards()), reducer_(reducer) {}
  AdamW optimizer(const AdamWConfig& c) const override { return AdamW(model_.layout(), c, shards_.pieces()); }
  std::vector<Shard> moment_ranges() const override { return shards_.pieces(); }
  float* params() override { return shards_.params(); }
  const float* grads() override { return shards_.grad_shard(); }
  void reduce(PhaseClock&) override {}  // reduce-scattered unit by unit inside the passes
  double norm(PhaseClock& clock) override {  // the shard's pieces, back to back
    double sq = 0;
    size_t at = 0;
    for (const Shard& p : shards_.pieces()) {
      sq += gradient_squares(model_, shards_.grad_shard() + at, p.begin, p.size(), p.begin);
      at += p.size();
    }
    sq = reducer_.sum_in_order(sq);  // one double per rank, added in rank order
    clock.lap(Phase::Allreduce);
    return std::sqrt(tp_group_sum(model_, sq, clock));
  }
  void after_update(PhaseClock&) override {}

 private:
  LlamaModel& model_;
  ParamShards& shards_;
  StepReducer& reducer_;
};

std::unique_ptr<ParamShards> weights(MPI_Comm ranks, const ParamLayout& layout, const ModelConfig& config) {
  return std::make_unique<MpiParamShards>(ranks, layout, config);
}

std::unique_ptr<GradSync> sync(LlamaModel& model, StepReducer* reducer, int, int) {
  if (!model.param_shards()) fail("ZeRO-3 needs a model built over its shards (ZeroVariant::weights)");
  return std::make_unique<FullySharded>(model, *reducer);
}

// Per micro-batch every unit is gathered for the forward and again for the backward, and its
// gradients reduce-scattered: 3 P 4 x micro-batches. None of it overlaps compute on a CPU
// (measured: a gather posted early is copied inside the next MPI call), so all of it counts.
ZeroCost cost(const ZeroShape& s) {
  ZeroCost c;
  c.params_grads = double(MpiParamShards::bytes_for(s.layout, s.config, s.ranks));
  c.wire_bytes = 3 * zero_part(s) * 4 * s.micro_batches;
  c.messages = 2.0 * (s.ranks - 1) * s.micro_batches;
  c.allocates_after_startup = true;
  return c;
}

}  // namespace

extern const ZeroVariant kFullySharded{3, "parameters, gradients and moments sharded", true, weights, sync, cost};

}  // namespace lct
