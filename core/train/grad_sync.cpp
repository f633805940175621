#include "train/grad_sync.hpp"

#include <cmath>

namespace lct {

double gradient_squares(const LlamaModel& model, const float* g, size_t lo, size_t n, size_t base) {
  const TpComm* tp = model.tp();
  if (!tp) return sum_squares(g + (lo - base), n);
  return tp_sum_squares(model.layout(), g, lo, lo + n, tp->rank() == 0, base);
}

double tp_group_sum(const LlamaModel& model, double squares, PhaseClock& clock) {
  if (!model.tp()) return squares;
  const double s = model.tp()->sum(squares);
  clock.lap(Phase::Allreduce);
  return s;
}

double whole_gradient_norm(LlamaModel& model, PhaseClock& clock) {
  const size_t n = model.layout().total;
  if (!model.tp()) return global_norm(model.grads(), n);
  return std::sqrt(tp_group_sum(model, gradient_squares(model, model.grads(), 0, n, 0), clock));
}

namespace {

class Replicated final : public GradSync {
 public:
  Replicated(LlamaModel& model, StepReducer* reducer) : model_(model), reducer_(reducer) {}
  AdamW optimizer(const AdamWConfig& c) const override {
    AdamW a(model_.layout(), c);
    a.stream_params(model_.master_tier());
    return a;
  }
  std::vector<Shard> moment_ranges() const override { return {{0, model_.layout().total}}; }
  float* params() override { return model_.params(); }
  const float* grads() override { return model_.grads(); }
  void reduce(PhaseClock& clock) override {
    if (!reducer_) return;
    reducer_->sum_gradients(model_.grads(), model_.layout().total);
    clock.lap(Phase::Allreduce);
  }
  double norm(PhaseClock& clock) override { return whole_gradient_norm(model_, clock); }
  void after_update(PhaseClock&) override {}

 private:
  LlamaModel& model_;
  StepReducer* reducer_;
};

}  // namespace

std::unique_ptr<GradSync> replicated_grad_sync(LlamaModel& model, StepReducer* reducer) {
  return std::make_unique<Replicated>(model, reducer);
}

}  // namespace lct
