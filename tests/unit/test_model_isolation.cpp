// Packed documents are independent through the whole model, not only inside attention.
#include <gtest/gtest.h>

#include <random>

#include "model/init.hpp"
#include "model/llama.hpp"
#include "test_docs.hpp"
#include "test_isa.hpp"

namespace lct {
namespace {

TEST(LlamaModel, PerturbingOneDocumentChangesNoOtherDocumentsLossOrGradient) {
  const ModelConfig c = model_preset("tiny");
  const TokenDataset ds = four_documents(c.vocab_size, 1, 256);
  const int64_t S = 128;
  ASSERT_EQ(pack_documents(ds.doc_offsets, S).sequences.size(), 1u);  // all four documents share one sequence
  Batch b = one_sequence(ds, S);

  LlamaModel model(c, {S, S, Checkpointing::None, {32, 32}, test_isa()});
  llama_init(model.layout(), c, 5, model.params());
  PhaseClock clock;
  // Score only documents 0, 2 and 3; then perturb a token in the middle of document 1.
  for (size_t t = 0; t < b.targets.size(); ++t)
    if (b.doc[t] == 1) b.targets[t] = -1;
  auto run = [&](std::vector<float>& grads) {
    model.zero_grads();
    const double loss = model.forward_backward(b, 1.0f, clock);
    grads.assign(model.grads(), model.grads() + model.layout().total);
    return loss;
  };
  std::vector<float> g1, g2;
  const double l1 = run(g1);
  const size_t victim = size_t(ds.doc_offsets[1] + 12);
  ASSERT_EQ(b.doc[victim], 1);
  b.tokens[victim] = (b.tokens[victim] + 7) % 256;
  const double l2 = run(g2);
  EXPECT_EQ(l1, l2);
  // Every gradient is identical, embedding rows included: nothing scored depends on the
  // perturbed token, so neither its old nor its new id receives any gradient.
  EXPECT_EQ(g1, g2);
  // And the perturbation is visible when document 1 is scored.
  for (size_t t = 0; t < b.targets.size(); ++t)
    if (b.doc[t] == 1 && t + 1 < b.targets.size() && b.doc[t + 1] == 1) b.targets[t] = b.tokens[t + 1];
  std::vector<float> g3;
  EXPECT_NE(run(g3), l2);
}

}  // namespace
}  // namespace lct
