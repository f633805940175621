// ZeRO-2's reduce-scatter on world-size ranks: in buckets smaller than a rank's range and
// not aligned with the ranges, each rank's range of g holds the sum over the ranks, exact
// (small integers), fp32 and bf16 on the wire.
//
// The hierarchical all-reduce on nodes of 2 ranks each (made with MPI_Comm_split): the sums
// of the flat one.
//
// ZeRO-3's store on world-size ranks: a whole array split into shards and gathered back is
// the same bits; acquire() delivers each unit whole in the passes' order (with the next
// unit's gather in flight); grads_done() leaves on each rank the sum over the ranks of its
// piece, added to what the shard held (micro-batches accumulate).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <vector>

#include "model/config.hpp"
#include "parallel/reducer.hpp"
#include "parallel/zero3.hpp"
#include "train/optimizer.hpp"

namespace lct {
namespace {

TEST(Zero2, BucketedReduceScatterSumsEachRanksRange) {
  int rank, ranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const size_t n = 5000;
  const std::vector<size_t> b = shard_bounds(n, ranks);
  for (Precision wire : {Precision::Fp32, Precision::Bf16})
    for (size_t bucket : {size_t(333), size_t(1) << 22}) {
      MpiStepReducer red(MPI_COMM_WORLD, wire, bucket);
      std::vector<float> g(n);
      for (size_t i = 0; i < n; ++i) g[i] = float((rank + 1) * int(i % 5));
      red.scatter_gradients(g.data(), b);
      const float rank_sum = float(ranks * (ranks + 1) / 2);
      for (size_t i = b[size_t(rank)]; i < b[size_t(rank) + 1]; ++i)
        ASSERT_EQ(g[i], rank_sum * float(i % 5)) << i << " bucket " << bucket;
      // The norm's sum: the same bits on every rank.
      const double total = red.sum_in_order(0.1 * (rank + 1));
      double first = total;
      MPI_Bcast(&first, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      EXPECT_EQ(total, first);
    }
}

// The hierarchical gradient all-reduce over nodes made of 2 consecutive ranks (4 ranks: 2 nodes
// of 2): integer values sum exactly, and other values to the flat all-reduce's within
// rounding; in buckets smaller than a node's share and not aligned with it, fp32 and bf16 on the wire.
// With fewer than 2 such nodes there is nothing to make hierarchical: the flat sum runs.
TEST(Reducer, HierarchicalAllreduceSumsAsTheFlatOne) {
  int rank, ranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  MPI_Comm nodes;
  MPI_Comm_split(MPI_COMM_WORLD, rank / 2, rank, &nodes);
  const size_t n = 5001;
  for (Precision wire : {Precision::Fp32, Precision::Bf16})
    for (size_t bucket : {size_t(333), size_t(1) << 22}) {
      MpiStepReducer tiered(MPI_COMM_WORLD, wire, bucket, true, nodes), flat(MPI_COMM_WORLD, wire, bucket);
      EXPECT_EQ(tiered.hierarchical(), ranks >= 4 && ranks % 2 == 0);
      std::vector<float> g(n), a(n), b(n);
      for (size_t i = 0; i < n; ++i) g[i] = float((rank + 1) * int(i % 5));
      tiered.sum_gradients(g.data(), n);
      const float rank_sum = float(ranks * (ranks + 1) / 2);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(g[i], rank_sum * float(i % 5)) << i << " bucket " << bucket;
      for (size_t i = 0; i < n; ++i) a[i] = b[i] = float(std::sin(double(i) + 0.37 * rank));
      tiered.sum_gradients(a.data(), n);
      flat.sum_gradients(b.data(), n);
      const double tol = wire == Precision::Bf16 ? 3e-2 : 1e-6;
      for (size_t i = 0; i < n; ++i) ASSERT_NEAR(a[i], b[i], tol * (1 + std::fabs(b[i]))) << i;
      // Every rank holds the same bits.
      std::vector<float> first = a;
      MPI_Bcast(first.data(), int(n), MPI_FLOAT, 0, MPI_COMM_WORLD);
      EXPECT_EQ(a, first);
    }
  MPI_Comm_free(&nodes);
}

TEST(Zero3, ShardsGatherUnitsAndReduceScatterGradients) {
  int rank, ranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  for (bool tied : {false, true}) {
    ModelConfig c = model_preset("tiny");
    c.tie_word_embeddings = tied;
    const ParamLayout layout = ParamLayout::llama(c);
    const std::vector<size_t> u = unit_bounds(layout, c);
    std::vector<float> whole(layout.total);
    for (size_t i = 0; i < whole.size(); ++i) whole[i] = float(std::sin(double(i)));
    MpiParamShards s(MPI_COMM_WORLD, layout, c);
    s.take_mine(whole.data(), s.params());
    std::vector<float> back(layout.total, -1.0f);
    s.gather_whole(s.params(), back.data());
    EXPECT_EQ(back, whole);

    // The forward order, each unit announcing the next, then the backward order.
    const int units = int(u.size()) - 1;
    for (int k = 0; k < units; ++k) {
      const float* p = s.acquire(k, k + 1 < units ? k + 1 : -1);
      for (size_t i = u[size_t(k)]; i < u[size_t(k) + 1]; ++i) ASSERT_EQ(p[i - u[size_t(k)]], whole[i]) << k;
      s.release(k);
    }
    // Gradients: rank r contributes (r + 1) * (i % 7), twice (two micro-batches); every
    // value a small integer, so the sums are exact in any order.
    std::fill(s.grad_shard(), s.grad_shard() + s.size(), 0.0f);
    for (int mb = 0; mb < 2; ++mb)
      for (int k = units - 1; k >= 0; --k) {
        float* g = s.grads(k);
        for (size_t i = u[size_t(k)]; i < u[size_t(k) + 1]; ++i) {
          ASSERT_EQ(g[i - u[size_t(k)]], 0.0f);  // zeroed for each use
          g[i - u[size_t(k)]] = float((rank + 1) * int(i % 7));
        }
        s.grads_done(k);
      }
    const float rank_sum = float(ranks * (ranks + 1) / 2);
    size_t at = 0;
    for (const Shard& piece : s.pieces())
      for (size_t i = piece.begin; i < piece.end; ++i, ++at)
        ASSERT_EQ(s.grad_shard()[at], 2 * rank_sum * float(i % 7)) << i;
    EXPECT_EQ(at, s.size());
    // The pieces of all ranks cover the layout once.
    unsigned long long mine = s.size(), all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(all, layout.total);
    EXPECT_LE(double(s.size()) * sizeof(float) * 2, double(MpiParamShards::bytes_for(layout, c, ranks)));
  }
}

}  // namespace
}  // namespace lct
