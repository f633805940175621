// Ring, all-gather and Ulysses attention on cp = world-size ranks against the single-rank
// flash kernel on the whole sequence: O, LSE, dQ, dK, dV of every rank's shard (zigzag or
// contiguous), causal, packed documents, padding and sliding windows; in fp32 and in bf16
// (bf16 activations travelling the ring, bf16 products where the CPU has them, against the
// single-rank bf16 kernel).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <type_traits>

#include "common/error.hpp"
#include "model/shard.hpp"
#include "parallel/ring_attention.hpp"
#include "parallel/ulysses_attention.hpp"
#include "test_isa.hpp"

namespace lct {
namespace {

int rank_of() { int r; MPI_Comm_rank(MPI_COMM_WORLD, &r); return r; }
int size_of() { int n; MPI_Comm_size(MPI_COMM_WORLD, &n); return n; }

enum class Layout { Causal, Documents, MostlyPadding };

struct Full {  // the whole micro-batch and its single-rank results
  int64_t B, S, T, H, KV, D;
  Precision precision;
  std::vector<float> q, k, v, dout, o, lse, dq, dk, dv;
  std::vector<int32_t> idx, doc;
  int64_t window = 0;
};

std::vector<bf16> to_bf16(const std::vector<float>& x) {
  std::vector<bf16> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = lct::to_bf16(x[i]);
  return out;
}

// Calls f(q, k, v, dout) with the arrays in the precision's activation type.
template <class F>
void with_type(Precision p, const std::vector<float>& q, const std::vector<float>& k,
               const std::vector<float>& v, const std::vector<float>& dout, F&& f) {
  if (p == Precision::Bf16) {
    const std::vector<bf16> q16 = to_bf16(q), k16 = to_bf16(k), v16 = to_bf16(v), d16 = to_bf16(dout);
    f(q16.data(), k16.data(), v16.data(), d16.data());
  } else {
    f(q.data(), k.data(), v.data(), dout.data());
  }
}

Full make_full(Layout layout, int64_t H, int64_t KV, uint32_t seed, int perturb_doc = -1,
               Precision precision = Precision::Fp32, int64_t window = 0) {
  const int N = size_of();
  Full f{2, 2 * N * 45, 0, H, KV, 16, precision, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, window};
  f.T = f.B * f.S;
  std::mt19937 gen(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  auto fill = [&](std::vector<float>& x, int64_t size) {
    x.resize(size_t(size));
    for (auto& e : x) e = n(gen);
  };
  fill(f.q, f.T * H * f.D);
  fill(f.k, f.T * KV * f.D);
  fill(f.v, f.T * KV * f.D);
  fill(f.dout, f.T * H * f.D);
  f.idx.resize(size_t(f.T));
  f.doc.resize(size_t(f.T));
  int32_t next_doc = 0;
  for (int64_t b = 0; b < f.B; ++b) {
    int64_t t = 0;
    const int64_t real = layout == Layout::MostlyPadding ? f.S / 4 : f.S;
    while (t < real) {  // odd document lengths, or one document per sequence
      const int64_t len = layout == Layout::Causal ? real : std::min<int64_t>(real - t, 1 + 2 * (gen() % 40));
      for (int64_t i = 0; i < len; ++i) f.doc[size_t(b * f.S + t + i)] = next_doc;
      t += len;
      ++next_doc;
    }
    for (; t < f.S; ++t) f.doc[size_t(b * f.S + t)] = -1;
  }
  for (int64_t t = 0; t < f.T; ++t) f.idx[size_t(t)] = int32_t(t);
  if (perturb_doc >= 0)
    for (int64_t t = 0; t < f.T; ++t)
      if (f.doc[size_t(t)] == perturb_doc)
        for (int64_t c = 0; c < KV * f.D; ++c) f.k[size_t(t * KV * f.D + c)] += 0.5f;

  const AttnDims d{f.T, f.T, H, KV, f.D, window};
  const TokenTags tags{f.idx.data(), f.doc.data()};
  FlashAttention flash({f.T, f.T, H, KV, f.D}, {16, 24}, test_isa(), precision);
  f.o.resize(f.q.size());
  f.lse.resize(size_t(H * f.T));
  f.dq.assign(f.q.size(), 0.f);
  f.dk.assign(f.k.size(), 0.f);
  f.dv.assign(f.k.size(), 0.f);
  with_type(precision, f.q, f.k, f.v, f.dout, [&](auto q, auto k, auto v, auto dout) {
    flash.forward(d, q, k, v, tags, tags, f.o.data(), f.lse.data());
    // delta from o as the model keeps it (the activation type), as the ring computes it
    std::vector<std::remove_const_t<std::remove_pointer_t<decltype(q)>>> o(f.o.size());
    for (size_t i = 0; i < o.size(); ++i) store_as(&o[i], f.o[i]);
    std::vector<float> delta(f.lse.size());
    attention_delta(o.data(), dout, f.T, H, f.D, delta.data());
    flash.backward(d, q, k, v, f.lse.data(), delta.data(), dout, tags, tags, f.dq.data(),
                   f.dk.data(), f.dv.data());
  });
  return f;
}

struct Local {  // this rank's shard and what the context-parallel op computed
  std::vector<int64_t> rows;
  std::vector<float> o, lse, dq, dk, dv;
  int ring_steps = 0;  // RingAttention's plan
};

template <class Op>
Local run_parallel(const Full& f, CpTransport transport = CpTransport::Auto,
                   CpSplit split = CpSplit::Zigzag) {
  const int N = size_of(), r = rank_of();
  Local L;
  L.rows = shard_indices(f.B, f.S, N, r, split);
  const int64_t Tl = int64_t(L.rows.size());
  auto gather = [&](const std::vector<float>& src, int64_t width) {
    std::vector<float> out(size_t(Tl * width));
    for (int64_t i = 0; i < Tl; ++i)
      std::copy_n(src.begin() + L.rows[size_t(i)] * width, width, out.begin() + i * width);
    return out;
  };
  const int64_t HD = f.H * f.D, KVD = f.KV * f.D;
  const std::vector<float> q = gather(f.q, HD), k = gather(f.k, KVD), v = gather(f.v, KVD),
                           dout = gather(f.dout, HD);
  std::vector<int32_t> idx, doc;
  for (int64_t row : L.rows) {
    idx.push_back(f.idx[size_t(row)]);
    doc.push_back(f.doc[size_t(row)]);
  }
  auto make = [&] {
    if constexpr (std::is_same_v<Op, RingAttention>)
      return Op(MPI_COMM_WORLD, Tl, f.H, f.KV, f.D, {16, 24}, test_isa(), f.precision, transport);
    else
      return Op(MPI_COMM_WORLD, Tl, f.H, f.KV, f.D, {16, 24}, test_isa(), f.precision);
  };
  Op op = make();
  const AttnDims d{Tl, Tl, f.H, f.KV, f.D, f.window};
  const TokenTags tags{idx.data(), doc.data()};
  op.new_tokens(tags, Tl, f.window);
  if constexpr (std::is_same_v<Op, RingAttention>) L.ring_steps = op.steps();
  PhaseClock clock;
  L.o.resize(q.size());
  L.lse.resize(size_t(f.H * Tl));
  L.dq.assign(q.size(), 0.f);
  L.dk.assign(k.size(), 0.f);
  L.dv.assign(k.size(), 0.f);
  with_type(f.precision, q, k, v, dout, [&](auto qx, auto kx, auto vx, auto dx) {
    op.forward(d, qx, kx, vx, tags, L.o.data(), L.lse.data(), clock);
    // the model keeps o in the activation type; delta is computed from it
    std::vector<std::remove_const_t<std::remove_pointer_t<decltype(qx)>>> o(L.o.size());
    for (size_t i = 0; i < o.size(); ++i) store_as(&o[i], L.o[i]);
    op.backward(d, qx, kx, vx, o.data(), L.lse.data(), dx, tags, L.dq.data(), L.dk.data(),
                L.dv.data(), clock);
  });
  return L;
}

// max |local - full rows| / max |full|, per tensor; lse rows live at [h, t].
void compare(const Full& f, const Local& L, const char* what) {
  const int64_t Tl = int64_t(L.rows.size());
  auto rel = [&](const std::vector<float>& loc, const std::vector<float>& full, int64_t width) {
    double diff = 0, scale = 1e-30;
    for (int64_t i = 0; i < Tl; ++i)
      for (int64_t c = 0; c < width; ++c) {
        const float a = loc[size_t(i * width + c)], b = full[size_t(L.rows[size_t(i)] * width + c)];
        EXPECT_FALSE(std::isnan(a));
        if (std::isinf(b) && a == b) continue;
        diff = std::max(diff, double(std::abs(a - b)));
        scale = std::max(scale, double(std::abs(b)));
      }
    return diff / scale;
  };
  std::vector<float> lse_t(size_t(Tl * f.H)), full_lse_t(size_t(f.T * f.H));  // to [t, h]
  for (int64_t h = 0; h < f.H; ++h) {
    for (int64_t i = 0; i < Tl; ++i) lse_t[size_t(i * f.H + h)] = L.lse[size_t(h * Tl + i)];
    for (int64_t t = 0; t < f.T; ++t) full_lse_t[size_t(t * f.H + h)] = f.lse[size_t(h * f.T + t)];
  }
  const double r[] = {rel(L.o, f.o, f.H * f.D), rel(lse_t, full_lse_t, f.H),
                      rel(L.dq, f.dq, f.H * f.D), rel(L.dk, f.dk, f.KV * f.D), rel(L.dv, f.dv, f.KV * f.D)};
  double worst[5];
  MPI_Allreduce(r, worst, 5, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (rank_of() == 0)
    std::printf("cp=%d %-28s max rel diff over ranks: O %.1e LSE %.1e dQ %.1e dK %.1e dV %.1e\n",
                size_of(), what, worst[0], worst[1], worst[2], worst[3], worst[4]);
  // bf16: each ring step rounds its own p (the running max differs from the whole
  // sequence's), so the shards agree with one rank to bf16's precision, not fp32's.
  const double bound = f.precision == Precision::Bf16 ? 1e-2 : 1e-5;
  for (double w : worst) EXPECT_LT(w, bound) << what;
}

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
    compare(f, run_parallel<RingAttention>(f), (std::string("bf16 ring ") + name).c_str());
    compare(f, run_parallel<AllGatherAttention>(f), (std::string("bf16 allgather ") + name).c_str());
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
    EXPECT_EQ(shm.o, mpi.o);
    EXPECT_EQ(shm.lse, mpi.lse);
    EXPECT_EQ(shm.dq, mpi.dq);
    EXPECT_EQ(shm.dk, mpi.dk);
    EXPECT_EQ(shm.dv, mpi.dv);
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
  try {
    UlyssesAttention u(MPI_COMM_WORLD, 64, 4, 1, 16, {16, 24}, test_isa(), Precision::Fp32);
    FAIL() << "1 KV head over " << size_of() << " ranks was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be divisible by cp"), std::string::npos) << e.what();
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
        compare(f, shm, ("ring shm " + name + s).c_str());
        compare(f, mpi, ("ring mpi " + name + s).c_str());
        EXPECT_EQ(shm.dk, mpi.dk);
        compare(f, run_parallel<AllGatherAttention>(f, CpTransport::Auto, split), ("allgather " + name + s).c_str());
        compare(f, run_parallel<UlyssesAttention>(f, CpTransport::Auto, split), ("ulysses " + name + s).c_str());
        // A contiguous shard is S/N = 90 tokens of each sequence: W <= 90 needs only the
        // previous rank's keys, so the ring stops after one hop.
        if (split == CpSplit::Contiguous && window <= f.S / N) EXPECT_EQ(shm.ring_steps, std::min(N, 2)) << name;
        if (split == CpSplit::Zigzag) EXPECT_EQ(shm.ring_steps, N) << name;  // the late chunk needs rank r + 1's
      }
    }
  const Full b = make_full(Layout::Documents, 4, 4, 12, -1, Precision::Bf16, 30);
  compare(b, run_parallel<RingAttention>(b, CpTransport::Auto, CpSplit::Contiguous), "bf16 ring W=30 contiguous");
  compare(b, run_parallel<UlyssesAttention>(b), "bf16 ulysses W=30");
}

// Without a window the plan changes nothing: every hop is made.
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
