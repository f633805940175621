// Hybrid (USP) context parallelism on cp = world-size ranks, as a grid of U Ulysses ranks x
// R = cp / U ring ranks, against the single-rank flash kernel on the whole micro-batch: O,
// LSE, dQ, dK, dV of every rank's hybrid shard (shard_indices with group = U), with a
// causal sequence, packed documents, GQA and ranks that hold only padding; fp32 and bf16;
// the ring over shared memory and over two-sided MPI. Every U that divides the world size
// and the KV heads runs (1 rank: U = 1; 2 ranks: U = 1, 2; 4 ranks: U = 1, 2, 4); the real
// grid (U = 2 x R = 2) needs 4 ranks and skips otherwise.
#include "common/error.hpp"
#include "mpi/cp_fixture.hpp"

namespace lct {
namespace {

using namespace cptest;

Local run_hybrid(const Full& f, int U, CpTransport transport = CpTransport::Auto,
                 CpSplit split = CpSplit::Zigzag) {
  return run_parallel<HybridAttention>(f, transport, split, U);
}

std::vector<int> degrees_for(int64_t KV) {  // every U that divides the world size and KV
  std::vector<int> out;
  for (int u = 1; u <= size_of(); ++u)
    if (size_of() % u == 0 && KV % u == 0) out.push_back(u);
  return out;
}

std::string name(const char* what, int U) {
  return std::string(what) + " U=" + std::to_string(U) + " R=" + std::to_string(size_of() / U);
}

// The shard: what a ring position's U ranks hold, concatenated in Ulysses-rank order, is
// that position's zigzag pair for R ranks (the ring's balance); every token is held once.
TEST(HybridShard, UlyssesGroupsTogetherHoldTheirRingPositionsZigzagPair) {
  const int64_t S = 2 * 8 * 6;
  for (int64_t N : {1, 2, 4, 8})
    for (int64_t U = 1; U <= N; ++U) {
      if (N % U != 0) continue;
      const int64_t R = N / U;
      std::vector<int> seen(size_t(2 * S), 0);
      for (int64_t p = 0; p < R; ++p) {
        std::vector<int64_t> joined;
        for (int64_t u = 0; u < U; ++u) {
          const std::vector<int64_t> part = shard_indices(1, S, N, p * U + u, CpSplit::Zigzag, U);
          EXPECT_EQ(int64_t(part.size()), S / N);
          joined.insert(joined.end(), part.begin(), part.end());
          for (int64_t i : shard_indices(2, S, N, p * U + u, CpSplit::Zigzag, U)) seen[size_t(i)]++;
        }
        EXPECT_EQ(joined, shard_indices(1, S, R, p, CpSplit::Zigzag)) << "N " << N << " U " << U << " p " << p;
      }
      for (int c : seen) EXPECT_EQ(c, 1) << "N " << N << " U " << U;
    }
  // group = 1 is the plain split, and a group that does not divide cp is refused
  EXPECT_EQ(shard_indices(2, S, 4, 3, CpSplit::Zigzag, 1), shard_indices(2, S, 4, 3, CpSplit::Zigzag));
  EXPECT_THROW(shard_indices(1, S, 4, 0, CpSplit::Zigzag, 3), Error);
}

TEST(HybridAttention, MatchesSingleRankCausalDocumentsGqaAndPadding) {
  for (Layout layout : {Layout::Causal, Layout::Documents, Layout::MostlyPadding}) {
    const char* what = layout == Layout::Causal ? "causal" : layout == Layout::Documents ? "documents" : "mostly padding";
    const Full mha = make_full(layout, 4, 4, 11);
    for (int U : degrees_for(4)) compare(mha, run_hybrid(mha, U), name((std::string(what) + " mha").c_str(), U));
    const Full gqa = make_full(layout, 8, 2, 12);  // 4 query heads per KV head
    for (int U : degrees_for(2)) compare(gqa, run_hybrid(gqa, U), name((std::string(what) + " gqa4").c_str(), U));
  }
}

TEST(HybridAttention, PaddingOnlyRanksGiveZeroOutputAndMinusInfinityLse) {
  const Full f = make_full(Layout::MostlyPadding, 8, 4, 13);
  for (int U : degrees_for(4)) {
    const Local L = run_hybrid(f, U);
    int64_t padding = 0;
    for (int64_t i = 0; i < int64_t(L.rows.size()); ++i)
      if (f.doc[size_t(L.rows[size_t(i)])] < 0) {
        ++padding;
        for (int64_t h = 0; h < f.H; ++h)
          ASSERT_EQ(L.lse[size_t(h * int64_t(L.rows.size()) + i)], -std::numeric_limits<float>::infinity());
        for (int64_t c = 0; c < f.H * f.D; ++c) ASSERT_EQ(L.o[size_t(i * f.H * f.D + c)], 0.0f);
        for (int64_t c = 0; c < f.H * f.D; ++c) ASSERT_EQ(L.dq[size_t(i * f.H * f.D + c)], 0.0f);
      }
    // with 4 ranks, U = 2: ranks 1, 2, 3 hold padding only
    if (size_of() == 4 && U == 2 && rank_of() > 0) {
      EXPECT_EQ(padding, int64_t(L.rows.size()));
    }
  }
}

TEST(HybridAttention, Bf16MatchesTheSingleRankBf16Kernel) {
  for (Layout layout : {Layout::Causal, Layout::Documents}) {
    const Full f = make_full(layout, 8, 4, 14, -1, Precision::Bf16);
    for (int U : degrees_for(4))
      compare(f, run_hybrid(f, U), name(layout == Layout::Causal ? "bf16 causal gqa2" : "bf16 documents gqa2", U));
  }
}

// The real grid: 2 Ulysses ranks x a ring of 2. Over shared memory and two-sided MPI the
// ring moves the same bytes: bitwise the same results, both equal to one rank.
TEST(HybridAttention, TwoByTwoGridOverBothTransportsMatchesSingleRankBitwiseAlike) {
  if (size_of() != 4) GTEST_SKIP() << "needs 4 ranks";
  for (Precision p : {Precision::Fp32, Precision::Bf16}) {
    const Full f = make_full(Layout::Documents, 8, 2, 15, -1, p);
    const Local shm = run_hybrid(f, 2, CpTransport::Shm), mpi = run_hybrid(f, 2, CpTransport::Mpi);
    compare(f, shm, p == Precision::Bf16 ? "bf16 2x2 ring over shm" : "2x2 ring over shm");
    compare(f, mpi, p == Precision::Bf16 ? "bf16 2x2 ring over mpi" : "2x2 ring over mpi");
    expect_bitwise_equal(shm, mpi);
    EXPECT_GT(shm.bytes_sent, 0u);
  }
}

// Sliding windows: the ring dimension plans on the Ulysses group's whole sequence (the
// group's tags, gathered), so a window within a ring position's share takes 2 ring steps.
TEST(HybridAttention, SlidingWindowsMatchSingleRankAndShortenTheRing) {
  for (int64_t window : {30, 100})
    for (Layout layout : {Layout::Causal, Layout::Documents}) {
      const Full f = make_full(layout, 4, 4, 16, -1, Precision::Fp32, window);
      for (int U : degrees_for(4))
        for (CpSplit split : {CpSplit::Zigzag, CpSplit::Contiguous}) {
          const std::string what = std::string(layout == Layout::Causal ? "causal" : "documents") + " W=" +
                                    std::to_string(window) + (split == CpSplit::Zigzag ? " zigzag" : " contiguous");
          const Local L = run_hybrid(f, U, CpTransport::Auto, split);
          compare(f, L, name(what.c_str(), U));
          const int R = size_of() / U;
          if (split == CpSplit::Contiguous && window <= f.S / R) {
            EXPECT_EQ(L.ring_steps, std::min(R, 2)) << what;
          }
        }
    }
}

TEST(HybridAttention, RefusesDegreesThatDoNotFitWithOneClearMessage) {
  auto message = [](int64_t cp, int64_t U, int64_t H, int64_t KV) -> std::string {
    try {
      HybridAttention::check_degree(cp, U, H, KV);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message(4, 3, 8, 4).find("does not divide --cp 4"), std::string::npos);
  EXPECT_NE(message(4, 3, 8, 4).find("use one of: 1, 2, 4"), std::string::npos);
  EXPECT_NE(message(4, 2, 6, 3).find("must be divisible by --ulysses-degree"), std::string::npos);
  EXPECT_NE(message(4, 4, 6, 2).find("use one of: 1, 2"), std::string::npos);
  EXPECT_EQ(message(4, 2, 8, 2), "");
  EXPECT_EQ(message(4, 4, 8, 2), "");  // 2 KV heads, each on 2 of the 4 Ulysses ranks
  EXPECT_EQ(message(4, 1, 3, 1), "");
  // the constructor refuses alike on every rank, before any communicator is split
  const int U = size_of() + 1;
  EXPECT_THROW((HybridAttention(MPI_COMM_WORLD, U, 64, 8, 4, 16, {16, 24}, test_isa(), Precision::Fp32)),
               Error);
}

}  // namespace
}  // namespace lct
