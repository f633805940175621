// ZeRO stage 0: every rank holds the whole parameters, gradients and AdamW moments; the
// gradients are all-reduced in buckets (train/grad_sync.cpp).
#include "parallel/reducer.hpp"
#include "parallel/zero/zero_variant.hpp"

namespace lct {

namespace {
std::unique_ptr<GradSync> sync(LlamaModel& model, StepReducer* reducer, int, int) {
  return replicated_grad_sync(model, reducer);
}

// Gradients all-reduced: 2 P e.
ZeroCost cost(const ZeroShape& s) {
  ZeroCost c;
  c.params_grads = s.whole_params_grads;
  c.scratch = double(MpiStepReducer::allreduce_scratch_bytes(s.layout.total, s.wire));
  c.wire_bytes = 2 * zero_part(s) * wire_elem(s);
  c.messages = 2.0 * (s.ranks - 1);
  c.all_reduce = true;
  return c;
}
}  // namespace

extern const ZeroVariant kReplicated{0, "replicated", false, nullptr, sync, cost};

}  // namespace lct
