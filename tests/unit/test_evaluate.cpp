// Evaluation shared over dp replicas (EvalShare): each replica scores its batches and the
// parts, merged (through the numbers the ranks exchange), are the whole evaluation.
#include <gtest/gtest.h>

#include "common/error.hpp"
#include "data/packing.hpp"
#include "data/passkey.hpp"
#include "model/init.hpp"
#include "test_isa.hpp"
#include "train/evaluate.hpp"

namespace lct {
namespace {

// Every count equal; the loss sums equal up to the order of their additions.
void expect_same(const EvalResult& a, const EvalResult& b) {
  EXPECT_NEAR(a.loss_sum, b.loss_sum, 1e-12 * std::abs(b.loss_sum));
  EXPECT_EQ(a.valid_targets, b.valid_targets);
  EXPECT_EQ(a.correct, b.correct);
  ASSERT_EQ(a.position_loss.size(), b.position_loss.size());
  for (size_t k = 0; k < a.position_loss.size(); ++k)
    EXPECT_NEAR(a.position_loss[k], b.position_loss[k], 1e-12 * std::abs(b.position_loss[k]));
  EXPECT_EQ(a.position_targets, b.position_targets);
  EXPECT_EQ(a.sequences, b.sequences);
  for (int k = 0; k < EvalResult::kBuckets; ++k) {
    EXPECT_EQ(a.asked[k], b.asked[k]);
    EXPECT_EQ(a.retrieved[k], b.retrieved[k]);
  }
  EXPECT_EQ(a.split_docs, b.split_docs);
  EXPECT_EQ(a.passkey.lengths, b.passkey.lengths);
  EXPECT_EQ(a.passkey.total, b.passkey.total);
  EXPECT_EQ(a.passkey.correct, b.passkey.correct);
  EXPECT_EQ(a.answer_tokens, b.answer_tokens);
  EXPECT_EQ(a.answer_right, b.answer_right);
  EXPECT_EQ(a.repeat_asked, b.repeat_asked);
  EXPECT_EQ(a.repeat_retrieved, b.repeat_retrieved);
}

TEST(Evaluate, PartsOfTheReplicasMergeIntoTheWholeEvaluation) {
  const ModelConfig c = model_preset("tiny");
  SyntheticSpec spec;
  spec.num_docs = 19;
  spec.doc_lengths = {240, 480, 1100};  // 1100: longer than a sequence, split and not scored
  spec.key_digits = 3;
  spec.seed = 4;
  const TokenDataset ds = make_passkey_dataset(spec);
  MemorySource data(ds);
  const int64_t S = 1024, B = 2;
  const int64_t batches = (int64_t(pack_documents(ds.doc_offsets, S).sequences.size()) + B - 1) / B;
  LlamaModel model(c, {B * S, S, Checkpointing::None, {32, 32}, test_isa()});
  llama_init(model.layout(), c, 3, model.params());
  PhaseClock clock;
  const EvalResult whole = evaluate(model, data, S, B, 0, clock);
  ASSERT_GT(whole.keys_asked(), 0);
  ASSERT_GT(whole.split_docs, 0);
  ASSERT_GT(whole.correct, 0);
  for (int64_t parts : {2, 3, 5}) {
    SCOPED_TRACE(parts);
    ASSERT_NE(batches % parts, 0) << batches;  // the last round has spare replicas
    EvalResult merged;
    for (int64_t part = 0; part < parts; ++part) {
      const EvalResult p = evaluate(model, data, S, B, 0, clock, {}, {}, EvalShare{parts, part});
      EXPECT_LT(p.sequences, whole.sequences);
      merged.merge(EvalResult::from_numbers(p.to_numbers()));
    }
    expect_same(merged, whole);
  }
  // --eval-sequences: the first 5 sequences, shared, are the first 5 evaluated alone.
  EvalResult first5;
  for (int64_t part = 0; part < 2; ++part)
    first5.merge(evaluate(model, data, S, B, 5, clock, {}, {}, EvalShare{2, part}));
  expect_same(first5, evaluate(model, data, S, B, 5, clock));
}

TEST(Evaluate, NumbersRoundTripEveryField) {
  EvalResult r;
  r.loss_sum = 12.5;
  r.valid_targets = 7;
  r.correct = 3;
  r.position_loss = {1.5, 2.25};
  r.position_targets = {4, 3};
  r.sequences = 2;
  r.asked[1] = 2, r.retrieved[1] = 1, r.asked[4] = 5;
  r.split_docs = 1;
  r.passkey.add(512, 0.3, true);
  r.passkey.add(256, 0.9, false);
  r.answer_tokens = {2, 2, 2};
  r.answer_right = {2, 1, 0};
  r.repeat_asked = 1, r.repeat_retrieved = 1;
  expect_same(EvalResult::from_numbers(r.to_numbers()), r);
  std::vector<double> cut = r.to_numbers();
  cut.pop_back();
  EXPECT_THROW(EvalResult::from_numbers(cut), Error);
}

TEST(PasskeyTable, MergeAddsRowsByLength) {
  PasskeyTable a, b;
  a.add(1024, 0.5, true);
  b.add(512, 0.0, false);
  b.add(1024, 0.5, false);
  b.add(2048, 0.9, true);
  a.merge(b);
  PasskeyTable all;
  for (auto [len, depth, ok] : {std::tuple{1024, 0.5, true}, {512, 0.0, false}, {1024, 0.5, false}, {2048, 0.9, true}})
    all.add(len, depth, ok);
  EXPECT_EQ(a.lengths, all.lengths);
  EXPECT_EQ(a.total, all.total);
  EXPECT_EQ(a.correct, all.correct);
}

}  // namespace
}  // namespace lct
