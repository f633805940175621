// Ring, all-gather and Ulysses attention on cp = world-size ranks against the single-rank
// flash kernel on the whole sequence: O, LSE, dQ, dK, dV of every rank's shard (zigzag or
// contiguous), causal, packed documents, padding and sliding windows; in fp32 and in bf16
// (bf16 activations travelling the ring, bf16 products where the CPU has them, against the
// single-rank bf16 kernel).
#include "common/error.hpp"
#include "model/balance.hpp"
#include "mpi/cp_fixture.hpp"
#include "parallel/world.hpp"

namespace lct {
namespace {

using namespace cptest;

TEST(RingAttention, CausalGqa2MatchesSingleRank) {
  const Full f = make_full(Layout::Causal, 4, 2, 1);
  compare(f, run_parallel<RingAttention>(f), "ring causal gqa2");
}

TEST(RingAttention, PackedDocumentsGqa4MatchSingleRank) {
  const Full f = make_full(Layout::Documents, 4, 1, 2);
  compare(f, run_parallel<RingAttention>(f), "ring documents gqa4");
}

TEST(RingAttention, RanksHoldingOnlyPaddingStayFinite) {
  const Full f = make_full(Layout::MostlyPadding, 4, 2, 3);
  const Local L = run_parallel<RingAttention>(f);
  compare(f, L, "ring mostly padding");
  for (int64_t i = 0; i < int64_t(L.rows.size()); ++i)
    if (f.doc[size_t(L.rows[size_t(i)])] < 0) {
      EXPECT_EQ(L.lse[size_t(i)], -std::numeric_limits<float>::infinity());
      EXPECT_EQ(L.o[size_t(i * f.H * f.D)], 0.0f);
    }
}

TEST(AllGatherAttention, MatchesSingleRankAndTheRing) {
  const Full f = make_full(Layout::Documents, 4, 2, 4);
  const Local a = run_parallel<AllGatherAttention>(f), r = run_parallel<RingAttention>(f);
  compare(f, a, "allgather documents gqa2");
  compare(f, r, "ring documents gqa2");
}

TEST(RingAttention, Bf16RingAndAllGatherMatchTheSingleRankBf16Kernel) {
  for (Layout layout : {Layout::Causal, Layout::Documents}) {
    const Full f = make_full(layout, 4, 2, 6, -1, Precision::Bf16);
    const char* name = layout == Layout::Causal ? "causal" : "documents";
    compare(f, run_parallel<RingAttention>(f), std::string("bf16 ring ") + name);
    compare(f, run_parallel<AllGatherAttention>(f), std::string("bf16 allgather ") + name);
  }
}

// The ranks of this test share a node: shm moves every hop through the shared window, mpi
// through two-sided MPI. The bytes that arrive are the same, so every result is bitwise so.
TEST(RingAttention, SharedMemoryAndTwoSidedTransportsGiveBitwiseTheSameResults) {
  for (Precision p : {Precision::Fp32, Precision::Bf16}) {
    const Full f = make_full(Layout::Documents, 4, 2, 7, -1, p);
    const Local shm = run_parallel<RingAttention>(f, CpTransport::Shm);
    const Local mpi = run_parallel<RingAttention>(f, CpTransport::Mpi);
    compare(f, shm, p == Precision::Bf16 ? "bf16 ring over shm" : "ring over shm");
    expect_bitwise_equal(shm, mpi);
  }
  if (size_of() > 1) {
    RingAttention ring(MPI_COMM_WORLD, 64, 4, 2, 16, {16, 24}, test_isa(), Precision::Fp32,
                       CpTransport::Shm);
    EXPECT_EQ(ring.describe().rfind("shm to rank", 0), 0u) << ring.describe();
  }
}

// Ulysses: every head split the rank counts allow (H = KV = 4 divides 1, 2 and 4 ranks;
// GQA 8/4 too), causal and packed documents, fp32 and bf16.
TEST(UlyssesAttention, MatchesSingleRankWithCausalAndPackedDocuments) {
  for (Layout layout : {Layout::Causal, Layout::Documents, Layout::MostlyPadding}) {
    const Full f = make_full(layout, 4, 4, 8);
    compare(f, run_parallel<UlyssesAttention>(f), "ulysses mha");
    const Full g = make_full(layout, 8, 4, 9);
    compare(g, run_parallel<UlyssesAttention>(g), "ulysses gqa2");
  }
  const Full b = make_full(Layout::Documents, 8, 4, 10, -1, Precision::Bf16);
  compare(b, run_parallel<UlyssesAttention>(b), "bf16 ulysses gqa2");
}

TEST(UlyssesAttention, RefusesHeadsNotDivisibleByTheDegree) {
  if (size_of() < 2) return;
  try {  // 6 query heads / 3 KV heads: 2 ranks split neither evenly nor by replication
    UlyssesAttention u(MPI_COMM_WORLD, 64, 6, 3, 16, {16, 24}, test_isa(), Precision::Fp32);
    FAIL() << "3 KV heads over " << size_of() << " ranks were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be divisible by cp"), std::string::npos) << e.what();
  }
}

// Fewer KV heads than ranks: each KV head is replicated on the ranks whose query heads
// read it, and their dK/dV summed on the way back (1 KV head on every rank; 2 on pairs).
TEST(UlyssesAttention, ReplicatedKvHeadsMatchSingleRank) {
  for (Layout layout : {Layout::Causal, Layout::Documents}) {
    const Full one = make_full(layout, 8, 1, 17);
    compare(one, run_parallel<UlyssesAttention>(one), "ulysses 1 KV head replicated");
    const Full two = make_full(layout, 4, 2, 18, -1, Precision::Fp32, 50);
    compare(two, run_parallel<UlyssesAttention>(two), "ulysses 2 KV heads W=50");
  }
  const Full b = make_full(Layout::Documents, 8, 1, 19, -1, Precision::Bf16);
  compare(b, run_parallel<UlyssesAttention>(b), "bf16 ulysses 1 KV head replicated");
  if (size_of() == 4) {  // hybrid 4 x 1 and 2 x 2 with 1 KV head
    const Full f = make_full(Layout::Documents, 8, 1, 20);
    for (int U : {2, 4})
      compare(f, run_parallel<HybridAttention>(f, CpTransport::Auto, CpSplit::Zigzag, U),
              "hybrid U=" + std::to_string(U) + " 1 KV head replicated");
  }
  EXPECT_EQ(UlyssesAttention::kv_heads(4, 2), 1);
  EXPECT_EQ(UlyssesAttention::kv_replicas(4, 2), 2);
  EXPECT_EQ(UlyssesAttention::kv_replicas(2, 4), 1);
  EXPECT_NE(UlyssesAttention::replication_note(8, 8, 2, "Ulysses").find("replicated on 4 ranks"), std::string::npos);
  EXPECT_EQ(UlyssesAttention::replication_note(2, 8, 2, "Ulysses"), "");
}

// Tokens placed by work (model/balance.hpp, --balance cost) from contiguous slices (as dp
// ranks take sequences): the long document of sequence 0 spread over the ranks in chunks,
// the short ones of sequence 1 kept whole, every rank holding a set of tokens no split makes. The ring's plan follows the tags wherever the
// tokens are: the results are the single rank's, with and without a window, fp32 and bf16.
TEST(BalancedPlacement, RingOnTokensPlacedByWorkMatchesSingleRank) {
  const int N = size_of(), r = rank_of();
  if (N < 2) GTEST_SKIP() << "one rank: nothing to place";
  for (int64_t window : {int64_t(0), int64_t(70)})
    for (Precision p : {Precision::Fp32, Precision::Bf16}) {
      const Full f = make_full(Layout::LongTail, 4, 2, 31, -1, p, window);
      Batch full;
      full.B = f.B;
      full.S = f.S;
      full.doc = f.doc;
      full.idx = f.idx;
      // The baseline: each rank a contiguous 1/N of the stream, as dp ranks take sequences.
      std::vector<std::vector<int64_t>> baseline(static_cast<size_t>(N));
      for (int64_t t = 0; t < f.T; ++t) baseline[size_t(t * N / f.T)].push_back(t);
      const Placement pl = balance_placement(full, baseline, window, {0, 1});
      const std::string name = cat(p == Precision::Bf16 ? "bf16 " : "", "balanced W=", window);
      ASSERT_TRUE(pl.balanced) << name;
      EXPECT_GE(pl.split_docs, 1) << name;
      EXPECT_LT(predicted_imbalance(pl.pairs, f.T / N, {0, 1}),
                predicted_imbalance(pl.baseline_pairs, f.T / N, {0, 1})) << name;
      const std::vector<int64_t>& mine = pl.rows[size_t(r)];
      compare(f, run_parallel<RingAttention>(f, CpTransport::Shm, CpSplit::Zigzag, 1, &mine), "ring shm " + name);
      compare(f, run_parallel<RingAttention>(f, CpTransport::Mpi, CpSplit::Zigzag, 1, &mine), "ring mpi " + name);
    }
}

// Sliding windows in every cp algorithm, transport and split: W = 30 is narrower than a
// zigzag chunk (45 tokens), W = 100 wider; packed documents cut windows short.
TEST(SlidingWindow, EveryAlgorithmTransportAndSplitMatchesSingleRank) {
  const int N = size_of();
  for (int64_t window : {30, 100})
    for (Layout layout : {Layout::Causal, Layout::Documents}) {
      const Full f = make_full(layout, 4, 4, 11, -1, Precision::Fp32, window);
      const std::string name = std::string(layout == Layout::Causal ? "causal" : "documents") +
                               " W=" + std::to_string(window);
      for (CpSplit split : {CpSplit::Zigzag, CpSplit::Contiguous}) {
        const std::string s = split == CpSplit::Zigzag ? " zigzag" : " contiguous";
        const Local shm = run_parallel<RingAttention>(f, CpTransport::Shm, split);
        const Local mpi = run_parallel<RingAttention>(f, CpTransport::Mpi, split);
        compare(f, shm, "ring shm " + name + s);
        compare(f, mpi, "ring mpi " + name + s);
        EXPECT_EQ(shm.dk, mpi.dk);
        compare(f, run_parallel<AllGatherAttention>(f, CpTransport::Auto, split), "allgather " + name + s);
        compare(f, run_parallel<UlyssesAttention>(f, CpTransport::Auto, split), "ulysses " + name + s);
        // A contiguous shard is S/N = 90 tokens of each sequence: W <= 90 needs only the
        // previous rank's keys, so the ring stops after one hop.
        if (split == CpSplit::Contiguous && window <= f.S / N) {
          EXPECT_EQ(shm.ring_steps, std::min(N, 2)) << name;
        }
        if (split == CpSplit::Zigzag) {
          EXPECT_EQ(shm.ring_steps, N) << name;  // the late chunk needs rank r + 1's
        }
      }
    }
  const Full b = make_full(Layout::Documents, 4, 4, 12, -1, Precision::Bf16, 30);
  compare(b, run_parallel<RingAttention>(b, CpTransport::Auto, CpSplit::Contiguous), "bf16 ring W=30 contiguous");
  compare(b, run_parallel<UlyssesAttention>(b), "bf16 ulysses W=30");
}

// Without a window the plan changes nothing: every hop is made.
// The memory estimate (layout_model: buffer_bytes, made before anything is allocated) equals
// what the constructors allocate, read back from the buffers and transports themselves: the
// all-gather's estimate had counted its gradient buffers 6 times the sequence's K instead of 4.
// Ring, all-gather, Ulysses and hybrid, fp32 and bf16, 1 to 4 KV heads.
TEST(RingAttention, BufferBytesEqualsWhatTheConstructorsAllocate) {
  const int n = comm_size(MPI_COMM_WORLD);
  for (const Precision p : {Precision::Fp32, Precision::Bf16})
    for (const int64_t KV : {int64_t(1), int64_t(2), int64_t(4)}) {
      const int64_t Tl = 48, H = 4, D = 16;
      const RingAttention ring(MPI_COMM_WORLD, Tl, H, KV, D, {16, 24}, test_isa(), p);
      EXPECT_EQ(ring.allocated_bytes(), RingAttention::buffer_bytes(Tl, H, KV, D, p)) << "KV " << KV;
      const AllGatherAttention all(MPI_COMM_WORLD, Tl, H, KV, D, {16, 24}, test_isa(), p);
      EXPECT_EQ(all.allocated_bytes(), AllGatherAttention::buffer_bytes(n, Tl, H, KV, D, p)) << "KV " << KV;
      // Ulysses and hybrid: their own buffers, plus (n > 1) room for MPI's copies of the two
      // all-to-all staging buffers, which the estimate keeps and no buffer here holds.
      if (H % n != 0) continue;
      const UlyssesAttention u(MPI_COMM_WORLD, Tl, H, KV, D, {16, 24}, test_isa(), p);
      const double staging = 2.0 * double(UlyssesAttention::sizes(n, Tl, H, KV, D, p).staging);
      EXPECT_EQ(u.allocated_bytes() + (n > 1 ? staging : 0.0),
                UlyssesAttention::exchange_bytes(n, Tl, H, KV, D, p)) << "KV " << KV;
      const int U = n >= 2 ? 2 : 1;
      const HybridAttention h(MPI_COMM_WORLD, U, Tl, H, KV, D, {16, 24}, test_isa(), p);
      const double reserve = U > 1 ? 2.0 * double(UlyssesAttention::sizes(U, Tl, H, KV, D, p).staging) : 0.0;
      EXPECT_EQ(h.allocated_bytes() + h.ring().allocated_bytes() + reserve,
                HybridAttention::buffer_bytes(U, Tl, H, KV, D, p)) << "KV " << KV;
    }
}

TEST(RingAttention, FullCausalPlanTakesEveryStep) {
  const Full f = make_full(Layout::Causal, 4, 2, 13);
  EXPECT_EQ(run_parallel<RingAttention>(f).ring_steps, size_of());
  EXPECT_EQ(run_parallel<RingAttention>(f, CpTransport::Auto, CpSplit::Contiguous).ring_steps, size_of());
}

TEST(RingAttention, PerturbingOneDocumentLeavesOthersUnchangedAcrossRanks) {
  const Full a = make_full(Layout::Documents, 4, 2, 5), b = make_full(Layout::Documents, 4, 2, 5, 2);
  const Local la = run_parallel<RingAttention>(a), lb = run_parallel<RingAttention>(b);
  int64_t changed = 0;
  const int64_t HD = a.H * a.D;
  for (int64_t i = 0; i < int64_t(la.rows.size()); ++i) {
    const int32_t doc = a.doc[size_t(la.rows[size_t(i)])];
    for (int64_t c = 0; c < HD; ++c) {
      const size_t e = size_t(i * HD + c);
      if (doc == 2) changed += la.o[e] != lb.o[e];
      else ASSERT_EQ(la.o[e], lb.o[e]) << "row " << la.rows[size_t(i)] << " doc " << doc;
    }
  }
  int64_t total = 0;
  MPI_Allreduce(&changed, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_GT(total, 0);  // document 2 itself did change
}

}  // namespace
}  // namespace lct
