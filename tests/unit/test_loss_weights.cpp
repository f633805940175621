// Per-token loss weights (TokenDataset::loss_weights, Batch::weights): each target's
// cross-entropy term is multiplied by its weight and the step is normalised by the summed
// weights, so a mask of ones changes nothing and a zero weight removes a target entirely.
#include <gtest/gtest.h>

#include <random>

#include "model/init.hpp"
#include "model/llama.hpp"
#include "test_docs.hpp"
#include "test_isa.hpp"

namespace lct {
namespace {

struct Fixture {
  ModelConfig c = model_preset("tiny");
  int64_t S = 128;
  Batch b;
  LlamaModel model{c, {S, S, Checkpointing::None, {32, 32}, test_isa()}};
  PhaseClock clock;

  Fixture() {
    b = one_sequence(four_documents(c.vocab_size, 3, 256), S);
    llama_init(model.layout(), c, 5, model.params());
  }
  // The step's loss (normalised as the trainer does: by the summed weights) and gradients.
  double run(const Batch& batch, std::vector<float>& grads) {
    model.zero_grads();
    const double w = batch.target_weight();
    const double loss = model.forward_backward(batch, 1.0f / float(w), clock) / w;
    grads.assign(model.grads(), model.grads() + model.layout().total);
    return loss;
  }
};

TEST(LossWeights, AMaskOfOnesGivesTheUnweightedLossAndGradientsBitwise) {
  Fixture f;
  std::vector<float> g0, g1;
  const double l0 = f.run(f.b, g0);
  Batch ones = f.b;
  ones.weights.assign(ones.targets.size(), 1.0f);
  EXPECT_EQ(ones.target_weight(), double(f.b.valid_targets()));
  const double l1 = f.run(ones, g1);
  EXPECT_EQ(l0, l1);
  EXPECT_EQ(g0, g1);
}

TEST(LossWeights, MaskedOutTargetsContributeNothing) {
  // Weights 0 on some targets = those targets not scored at all, bitwise.
  Fixture f;
  Batch masked = f.b, dropped = f.b;
  masked.weights.assign(masked.targets.size(), 0.0f);
  std::mt19937 gen(9);
  int64_t kept = 0;
  for (size_t t = 0; t < masked.targets.size(); ++t) {
    if (masked.targets[t] < 0) continue;
    if (gen() % 3 == 0) {
      masked.weights[t] = 1.0f;
      ++kept;
    } else {
      dropped.targets[t] = -1;
    }
  }
  ASSERT_GT(kept, 5);
  ASSERT_LT(kept, f.b.valid_targets() - 5);
  std::vector<float> gm, gd, g_all;
  const double lm = f.run(masked, gm), ld = f.run(dropped, gd);
  EXPECT_EQ(lm, ld);
  EXPECT_EQ(gm, gd);
  EXPECT_NE(f.run(f.b, g_all), lm);  // and the mask did change something
}

TEST(LossWeights, TheLossIsTheWeightedMeanOfThePerTokenLosses) {
  Fixture f;
  const size_t T = f.b.targets.size();
  std::vector<int32_t> argmax(T);
  std::vector<float> token_loss(T);
  f.model.forward(f.b, f.clock, argmax.data(), token_loss.data());  // unweighted per-token losses
  Batch w = f.b;
  w.weights.resize(T);
  std::mt19937 gen(4);
  double num = 0, den = 0;
  for (size_t t = 0; t < T; ++t) {
    w.weights[t] = float(gen() % 7) * 0.25f;
    if (w.targets[t] < 0) continue;
    num += double(w.weights[t]) * double(token_loss[t]);
    den += double(w.weights[t]);
  }
  std::vector<float> g;
  EXPECT_NEAR(f.run(w, g), num / den, 1e-6 * num / den);
  EXPECT_DOUBLE_EQ(w.target_weight(), den);
}

TEST(LossWeights, GradientsAreLinearInTheWeights) {
  // Weights w1 + w2 give the gradient of w1 plus that of w2 (each step normalised by its own
  // sum, so scaled back here), within float rounding.
  Fixture f;
  const size_t T = f.b.targets.size();
  Batch a = f.b, b = f.b, ab = f.b;
  a.weights.assign(T, 0.0f);
  b.weights.assign(T, 0.0f);
  ab.weights.assign(T, 0.0f);
  std::mt19937 gen(6);
  for (size_t t = 0; t < T; ++t) {
    a.weights[t] = float(gen() % 4) * 0.5f;
    b.weights[t] = float(gen() % 3) * 0.75f;
    ab.weights[t] = a.weights[t] + b.weights[t];
  }
  std::vector<float> ga, gb, gab;
  const double wa = a.target_weight(), wb = b.target_weight(), wab = ab.target_weight();
  const double la = f.run(a, ga), lb = f.run(b, gb), lab = f.run(ab, gab);
  EXPECT_NEAR(lab * wab, la * wa + lb * wb, 1e-6 * lab * wab);
  double worst = 0, largest = 0;
  for (size_t i = 0; i < gab.size(); ++i) {
    const double sum = (double(ga[i]) * wa + double(gb[i]) * wb) / wab;
    worst = std::max(worst, std::abs(double(gab[i]) - sum));
    largest = std::max(largest, std::abs(sum));
  }
  EXPECT_LT(worst, 1e-4 * largest) << worst << " of " << largest;
}

// train's check of --data: the targets (all but each document's first token) counted in
// pieces of 2^20 weights across document boundaries, as a per-document count would count them.
TEST(LossWeights, CountedAcrossPiecesAsDocumentByDocument) {
  TokenDataset ds;
  ds.vocab_size = 16;
  std::mt19937 gen(3);
  ds.doc_offsets = {0};
  while (ds.doc_offsets.back() < (int64_t(1) << 20) + 5000)  // a document straddles the piece boundary
    ds.doc_offsets.push_back(ds.doc_offsets.back() + 2 + int64_t(gen() % 3000));
  const int64_t n = ds.doc_offsets.back();
  ds.tokens.assign(size_t(n), 1);
  ds.loss_weights.assign(size_t(n), 0.0f);
  for (int64_t i = 0; i < n; ++i)
    if (gen() % 5000 == 0) ds.loss_weights[size_t(i)] = 0.5f;  // most documents: none
  LossWeightCount want;
  for (int64_t d = 0; d < ds.num_docs(); ++d) {
    const int64_t before = want.weighted;
    for (int64_t i = ds.doc_offsets[size_t(d)] + 1; i < ds.doc_offsets[size_t(d) + 1]; ++i) {
      want.sum += ds.loss_weights[size_t(i)];
      want.weighted += ds.loss_weights[size_t(i)] > 0;
      ++want.targets;
    }
    want.documents_without += want.weighted == before;
  }
  MemorySource src(ds);
  const LossWeightCount got = count_loss_weights(src);
  EXPECT_EQ(got.targets, want.targets);
  EXPECT_EQ(got.weighted, want.weighted);
  EXPECT_EQ(got.documents_without, want.documents_without);
  EXPECT_DOUBLE_EQ(got.sum, want.sum);
  EXPECT_GT(want.documents_without, 0);
  EXPECT_GT(want.weighted, 0);
}

}  // namespace
}  // namespace lct
