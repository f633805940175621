// Tensor parallelism over the world's ranks as one tp group (np 1, 2, 4):
//  - the vocabulary-parallel LM head + cross-entropy (each rank V/tp rows of the head) gives
//    the loss, the input gradient, the greedy ids and per-token losses of the plain one over
//    the whole vocabulary, and each rank the gradient of its own rows (sizes that are
//    multiples of nothing, chunks that cut rows and vocabulary unevenly, masked targets);
//  - a model over tp slices (heads, KV heads, SwiGLU width, vocabulary) trains one
//    micro-batch with the whole model's loss and gradients (gathered whole), for untied and
//    tied embeddings, fp32 with every checkpointing policy, with and without sequence
//    parallelism (the residual stream's rows split over the group), and in bf16;
//  - tp_take_local then tp_gather_whole gives back the whole array, bit for bit;
//  - the memory estimate (layout_model) counts a rank's slices of the state and, under tp,
//    what a resume holds besides: the whole weights and moments it reads and the rank's
//    slices of the moments cut from them.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/xent.hpp"
#include "model/init.hpp"
#include "model/llama.hpp"
#include "model/tp.hpp"
#include "parallel/layout_model.hpp"
#include "parallel/tp_comm_mpi.hpp"
#include "parallel/zero3.hpp"
#include "test_isa.hpp"
#include "test_docs.hpp"

namespace lct {
namespace {

TEST(Tp, VocabParallelCrossEntropyEqualsThePlainOne) {
  MpiTpComm tp(MPI_COMM_WORLD);
  const int64_t Vl = 37, V = Vl * tp.size(), T = 29, C = 13;
  std::mt19937 gen(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(T * C)), w(static_cast<size_t>(V * C));
  for (float& f : x) f = nd(gen);
  for (float& f : w) f = nd(gen);
  std::vector<int32_t> targets(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) targets[size_t(t)] = t % 7 == 3 ? -1 : int32_t(gen() % uint32_t(V));
  const XentChunks chunks{8, 11};  // neither divides T or Vl
  LmHeadXent whole(T, V, Precision::Fp32, chunks);
  std::vector<float> dx(static_cast<size_t>(T * C)), dw(static_cast<size_t>(V * C), 0.0f), loss_t(static_cast<size_t>(T));
  std::vector<int32_t> am(static_cast<size_t>(T));
  const double loss = whole.run(x.data(), w.data(), targets.data(), T, C, 0.5f, dx.data(), dw.data(),
                                am.data(), loss_t.data());

  LmHeadXent part(T, Vl, Precision::Fp32, chunks, &tp, Vl * tp.rank());
  const float* wl = w.data() + Vl * tp.rank() * C;
  std::vector<float> dxl(static_cast<size_t>(T * C)), dwl(static_cast<size_t>(Vl * C), 0.0f), loss_tl(static_cast<size_t>(T));
  std::vector<int32_t> aml(static_cast<size_t>(T));
  const double lossl = part.run(x.data(), wl, targets.data(), T, C, 0.5f, dxl.data(), dwl.data(),
                                aml.data(), loss_tl.data());
  EXPECT_NEAR(lossl, loss, 1e-5 * std::abs(loss));
  EXPECT_EQ(aml, am);
  for (int64_t t = 0; t < T; ++t) EXPECT_NEAR(loss_tl[size_t(t)], loss_t[size_t(t)], 1e-5) << t;
  for (int64_t i = 0; i < T * C; ++i) ASSERT_NEAR(dxl[size_t(i)], dx[size_t(i)], 1e-5) << i;
  for (int64_t i = 0; i < Vl * C; ++i)
    ASSERT_NEAR(dwl[size_t(i)], dw[size_t(Vl * tp.rank() * C + i)], 1e-5) << i;
  // Forward only (evaluation): the same loss and greedy ids.
  std::vector<int32_t> am2(static_cast<size_t>(T));
  EXPECT_NEAR(part.run(x.data(), wl, targets.data(), T, C, 0.0f, nullptr, nullptr, am2.data()), loss,
              1e-5 * std::abs(loss));
  EXPECT_EQ(am2, am);
}

ModelConfig tp_config(bool tied) {
  ModelConfig c;
  c.vocab_size = 4 * 75;  // 300 (the ids of the batch are below 256)
  c.hidden_size = 64;
  c.intermediate_size = 4 * 11;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;  // grouped-query: 2 query heads per KV head
  c.max_position_embeddings = 256;
  c.tie_word_embeddings = tied;
  return c;
}

TEST(Tp, TakeLocalThenGatherWholeIsTheSameBits) {
  MpiTpComm tp(MPI_COMM_WORLD);
  for (bool tied : {false, true}) {
    const ModelConfig c = tp_config(tied);
    const ParamLayout full = ParamLayout::llama(c), local = ParamLayout::llama(c, tp.size());
    std::vector<float> whole(full.total), mine(local.total), back(full.total);
    for (size_t i = 0; i < whole.size(); ++i) whole[i] = float(std::sin(double(i)));
    tp_take_local(full, local, {tp.size(), tp.rank()}, whole.data(), mine.data());
    tp_gather_whole(tp, full, local, mine.data(), back.data());
    EXPECT_EQ(back, whole);
  }
}

TEST(Tp, ModelOverSlicesTrainsTheWholeModelsLossAndGradients) {
  MpiTpComm tp(MPI_COMM_WORLD);
  const int64_t S = 128;
  Batch b = one_sequence(four_documents(300, 1, 290), S);  // ids up to 289: every rank's rows
  struct Case {
    bool tied;
    Checkpointing ck;
    bool sequence_parallel;
    Precision precision;
  };
  std::vector<Case> cases;
  for (bool tied : {false, true})
    for (Checkpointing ck : {Checkpointing::None, Checkpointing::Attention, Checkpointing::Full})
      for (bool sp : {false, true}) cases.push_back({tied, ck, sp, Precision::Fp32});
  for (bool sp : {false, true}) cases.push_back({false, Checkpointing::None, sp, Precision::Bf16});
  for (const Case& k : cases) {
      const bool tied = k.tied, b16 = k.precision == Precision::Bf16;
      const Checkpointing ck = k.ck;
      const ModelConfig c = tp_config(tied);
      const ModelShape shape{S, S, ck, {32, 32}, test_isa(), k.precision, k.sequence_parallel};
      SCOPED_TRACE(testing::Message() << "tied " << tied << " " << to_string(ck) << " sequence-parallel "
                                      << k.sequence_parallel << " bf16 " << b16);
      LlamaModel whole(c, shape);
      llama_init(whole.layout(), c, 5, whole.params());
      LlamaModel part(c, shape, nullptr, nullptr, &tp);
      tp_take_local(whole.layout(), part.layout(), part.tp_split(), whole.params(), part.params());
      PhaseClock clock;
      whole.zero_grads();
      part.zero_grads();
      const double l1 = whole.forward_backward(b, 0.01f, clock);
      const double l2 = part.forward_backward(b, 0.01f, clock);
      // bf16: the products' operands are rounded alike, the sums over the group in another
      // order than one rank's.
      const double tol = b16 ? 2e-3 : 1e-5;
      EXPECT_NEAR(l2, l1, tol * l1);
      std::vector<float> g(whole.layout().total);
      tp_gather_whole(tp, whole.layout(), part.layout(), part.grads(), g.data());
      float big = 0;
      for (size_t i = 0; i < g.size(); ++i) big = std::max(big, std::abs(whole.grads()[i]));
      for (const TensorSpec& t : whole.layout().tensors)
        for (size_t i = t.offset; i < t.offset + t.numel; ++i)
          ASSERT_NEAR(g[i], whole.grads()[i], (b16 ? 2e-2 : 1e-5) * big) << t.name << " " << i - t.offset;
      // Forward only: the same loss and greedy ids.
      std::vector<int32_t> a1(static_cast<size_t>(S)), a2(static_cast<size_t>(S));
      EXPECT_NEAR(part.forward(b, clock, a2.data()), whole.forward(b, clock, a1.data()), tol * l1);
      if (!b16) {
        EXPECT_EQ(a1, a2);
      }
  }
  // Sequence parallelism keeps 1/tp of the residual stream's activations.
  if (tp.size() > 1) {
    const ModelConfig c = tp_config(false);
    ModelShape shape{S, S, Checkpointing::None, {32, 32}, test_isa()};
    const size_t plain = LlamaModel::memory(c, shape, 1, tp.size()).activations;
    shape.sequence_parallel = true;
    EXPECT_LT(LlamaModel::memory(c, shape, 1, tp.size()).activations, plain);
  }
}

// Process-local (every rank computes the same). Checkpoints are written and read by parts,
// so only start-up holds anything beyond a step: the model file's weights whole, and under tp
// this rank's slices of them (P), freed before the AdamW moments are allocated (and under
// ZeRO-3 before the model's activations and scratch). Measured on the 30m preset
// (docs/results/2026-11-23-plan-vs-measured.md): fresh and resumed runs peak alike, within
// 10% of this estimate; the estimate that counted a resume's whole copies (3 whole + 2 P
// under tp) was 26-30% above a fresh start.
TEST(Tp, MemoryEstimateCountsTheSlicesAndWhatStartUpHolds) {
  const ModelConfig c = tp_config(false);
  const ModelShape shape{256, 256, Checkpointing::None, {32, 32}, test_isa()};
  const double whole = double(ParamLayout::llama(c).total) * 4;
  auto estimate = [&](int64_t tp, int64_t dp, int64_t zero) {
    Layout l;
    l.ranks_per_node = tp * dp;
    l.plan.tp = tp;
    l.plan.dp = dp;
    l.plan.zero = zero;
    l.seq_len = 256;
    return estimate_rank_memory(c, shape, l);
  };
  // Without tp the model file's weights (4 bytes a parameter) are freed before the moments
  // (8 bytes a parameter, 4 under ZeRO over 2 ranks; ZeRO-3 also before the model) exist:
  // start-up stays under a step, whatever the stage.
  EXPECT_EQ(estimate(1, 1, 0).transient, 0.0);
  EXPECT_EQ(estimate(1, 2, 1).transient, 0.0);
  EXPECT_EQ(estimate(1, 2, 2).transient, 0.0);
  EXPECT_EQ(estimate(1, 2, 3).transient, 0.0);
  const RankMemory one = estimate(1, 1, 0);
  for (const int64_t tp : {int64_t(2), int64_t(4)}) {
    const ParamLayout local = ParamLayout::llama(c, int(tp));
    const double P = double(local.total) * 4;
    EXPECT_GT(P, whole / double(tp));  // the norms stay whole on every rank
    EXPECT_LT(P, whole / double(tp) * 1.05);
    const RankMemory m = estimate(tp, 1, 0);
    EXPECT_EQ(m.params_grads, 2 * P) << "tp " << tp;
    EXPECT_EQ(m.optimizer, 2 * P) << "tp " << tp;
    EXPECT_LT(m.activations, one.activations) << "tp " << tp;
    // The whole weights and the slice buffer, less the moments (2 P) not yet allocated.
    EXPECT_EQ(m.transient, whole + P - 2 * P) << "tp " << tp;
    EXPECT_GT(m.transient, 0.0) << "tp " << tp;
    // ZeRO over dp 2 of the slices: the moments (and under stage 3 the parameters) split
    // again; ZeRO-3 frees the start-up copies before the model is built.
    const ModelMemory mm = LlamaModel::memory(c, shape, 1, int(tp));
    for (const int64_t zero : {int64_t(1), int64_t(2), int64_t(3)}) {
      const RankMemory z = estimate(tp, 2, zero);
      EXPECT_EQ(z.optimizer, P) << "tp " << tp << " zero " << zero;
      EXPECT_EQ(z.transient, zero == 3 ? std::max(0.0, whole + P - P - z.activations - double(mm.scratch))
                                       : whole + P - P)
          << "tp " << tp << " zero " << zero;
      EXPECT_EQ(z.params_grads, zero == 3 ? double(MpiParamShards::bytes_for(local, c, 2)) : 2 * P)
          << "tp " << tp << " zero " << zero;
    }
  }
}

}  // namespace
}  // namespace lct
