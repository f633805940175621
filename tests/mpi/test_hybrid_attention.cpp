// Hybrid (USP) context parallelism on cp = world-size ranks, as a grid of U Ulysses ranks x
// R = cp / U ring ranks, against the single-rank flash kernel on the whole micro-batch: O,
// LSE, dQ, dK, dV of every rank's hybrid shard (shard_indices with group = U), with a
// causal sequence, packed documents, GQA and ranks that hold only padding; fp32 and bf16;
// the ring over shared memory and over two-sided MPI. Every U that divides the world size
// and the KV heads runs (1 rank: U = 1; 2 ranks: U = 1, 2; 4 ranks: U = 1, 2, 4); the real
// grid (U = 2 x R = 2) needs 4 ranks and skips otherwise.
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
#include "parallel/hybrid_attention.hpp"
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
};

template <class F>
void with_type(Precision p, const std::vector<float>& q, const std::vector<float>& k,
               const std::vector<float>& v, const std::vector<float>& dout, F&& f) {
  if (p == Precision::Bf16) {
    auto cv = [](const std::vector<float>& x) {
      std::vector<bf16> out(x.size());
      for (size_t i = 0; i < x.size(); ++i) out[i] = to_bf16(x[i]);
      return out;
    };
    const std::vector<bf16> q16 = cv(q), k16 = cv(k), v16 = cv(v), d16 = cv(dout);
    f(q16.data(), k16.data(), v16.data(), d16.data());
  } else {
    f(q.data(), k.data(), v.data(), dout.data());
  }
}

// Two sequences of S = 2 x cp x 45 tokens; MostlyPadding: only the first quarter of each is
// real, so with U = 2, R = 2 cp ranks 1, 2 and 3 hold nothing but padding.
Full make_full(Layout layout, int64_t H, int64_t KV, uint32_t seed, Precision precision = Precision::Fp32) {
  const int N = size_of();
  Full f{2, 2 * N * 45, 0, H, KV, 16, precision, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
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
    while (t < real) {
      const int64_t len = layout == Layout::Causal ? real : std::min<int64_t>(real - t, 1 + 2 * (gen() % 40));
      for (int64_t i = 0; i < len; ++i) f.doc[size_t(b * f.S + t + i)] = next_doc;
      t += len;
      ++next_doc;
    }
    for (; t < f.S; ++t) f.doc[size_t(b * f.S + t)] = -1;
  }
  for (int64_t t = 0; t < f.T; ++t) f.idx[size_t(t)] = int32_t(t);

  const AttnDims d{f.T, f.T, H, KV, f.D};
  const TokenTags tags{f.idx.data(), f.doc.data()};
  FlashAttention flash({f.T, f.T, H, KV, f.D}, {16, 24}, test_isa(), precision);
  f.o.resize(f.q.size());
  f.lse.resize(size_t(H * f.T));
  f.dq.assign(f.q.size(), 0.f);
  f.dk.assign(f.k.size(), 0.f);
  f.dv.assign(f.k.size(), 0.f);
  with_type(precision, f.q, f.k, f.v, f.dout, [&](auto q, auto k, auto v, auto dout) {
    flash.forward(d, q, k, v, tags, tags, f.o.data(), f.lse.data());
    std::vector<std::remove_const_t<std::remove_pointer_t<decltype(q)>>> o(f.o.size());
    for (size_t i = 0; i < o.size(); ++i) store_as(&o[i], f.o[i]);
    std::vector<float> delta(f.lse.size());
    attention_delta(o.data(), dout, f.T, H, f.D, delta.data());
    flash.backward(d, q, k, v, f.lse.data(), delta.data(), dout, tags, tags, f.dq.data(),
                   f.dk.data(), f.dv.data());
  });
  return f;
}

struct Local {  // this rank's shard and what hybrid attention computed
  std::vector<int64_t> rows;
  std::vector<float> o, lse, dq, dk, dv;
  size_t bytes_sent = 0;
};

Local run_hybrid(const Full& f, int U, CpTransport transport = CpTransport::Auto) {
  const int N = size_of(), r = rank_of();
  Local L;
  L.rows = shard_indices(f.B, f.S, N, r, CpSplit::Zigzag, U);
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
  HybridAttention op(MPI_COMM_WORLD, U, Tl, f.H, f.KV, f.D, {16, 24}, test_isa(), f.precision, transport);
  EXPECT_EQ(op.ulysses_degree(), U);
  EXPECT_EQ(op.ring_degree(), N / U);
  const AttnDims d{Tl, Tl, f.H, f.KV, f.D};
  const TokenTags tags{idx.data(), doc.data()};
  PhaseClock clock;
  L.o.resize(q.size());
  L.lse.resize(size_t(f.H * Tl));
  L.dq.assign(q.size(), 0.f);
  L.dk.assign(k.size(), 0.f);
  L.dv.assign(k.size(), 0.f);
  with_type(f.precision, q, k, v, dout, [&](auto qx, auto kx, auto vx, auto dx) {
    op.forward(d, qx, kx, vx, tags, L.o.data(), L.lse.data(), clock);
    std::vector<std::remove_const_t<std::remove_pointer_t<decltype(qx)>>> o(L.o.size());
    for (size_t i = 0; i < o.size(); ++i) store_as(&o[i], L.o[i]);
    op.backward(d, qx, kx, vx, o.data(), L.lse.data(), dx, tags, L.dq.data(), L.dk.data(),
                L.dv.data(), clock);
  });
  L.bytes_sent = op.bytes_sent();
  return L;
}

// max |local - full rows| / max |full| per tensor, worst over ranks, against the bound.
void compare(const Full& f, const Local& L, const std::string& what) {
  const int64_t Tl = int64_t(L.rows.size());
  auto rel = [&](const std::vector<float>& loc, const std::vector<float>& full, int64_t width) {
    double diff = 0, scale = 1e-30;
    for (int64_t i = 0; i < Tl; ++i)
      for (int64_t c = 0; c < width; ++c) {
        const float a = loc[size_t(i * width + c)], b = full[size_t(L.rows[size_t(i)] * width + c)];
        EXPECT_FALSE(std::isnan(a)) << what;
        if (std::isinf(b) && a == b) continue;
        diff = std::max(diff, std::isinf(a) ? HUGE_VAL : double(std::abs(a - b)));
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
    std::printf("cp=%d %-36s max rel diff over ranks: O %.1e LSE %.1e dQ %.1e dK %.1e dV %.1e\n",
                size_of(), what.c_str(), worst[0], worst[1], worst[2], worst[3], worst[4]);
  const double bound = f.precision == Precision::Bf16 ? 1e-2 : 1e-5;
  for (double w : worst) EXPECT_LT(w, bound) << what;
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
    const Full f = make_full(layout, 8, 4, 14, Precision::Bf16);
    for (int U : degrees_for(4))
      compare(f, run_hybrid(f, U), name(layout == Layout::Causal ? "bf16 causal gqa2" : "bf16 documents gqa2", U));
  }
}

// The real grid: 2 Ulysses ranks x a ring of 2. Over shared memory and two-sided MPI the
// ring moves the same bytes: bitwise the same results, both equal to one rank.
TEST(HybridAttention, TwoByTwoGridOverBothTransportsMatchesSingleRankBitwiseAlike) {
  if (size_of() != 4) GTEST_SKIP() << "needs 4 ranks";
  for (Precision p : {Precision::Fp32, Precision::Bf16}) {
    const Full f = make_full(Layout::Documents, 8, 2, 15, p);
    const Local shm = run_hybrid(f, 2, CpTransport::Shm), mpi = run_hybrid(f, 2, CpTransport::Mpi);
    compare(f, shm, p == Precision::Bf16 ? "bf16 2x2 ring over shm" : "2x2 ring over shm");
    compare(f, mpi, p == Precision::Bf16 ? "bf16 2x2 ring over mpi" : "2x2 ring over mpi");
    EXPECT_EQ(shm.o, mpi.o);
    EXPECT_EQ(shm.lse, mpi.lse);
    EXPECT_EQ(shm.dq, mpi.dq);
    EXPECT_EQ(shm.dk, mpi.dk);
    EXPECT_EQ(shm.dv, mpi.dv);
    EXPECT_GT(shm.bytes_sent, 0u);
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
  EXPECT_NE(message(4, 4, 8, 2).find("must be divisible by --ulysses-degree"), std::string::npos);
  EXPECT_NE(message(4, 4, 6, 2).find("use one of: 1, 2"), std::string::npos);
  EXPECT_EQ(message(4, 2, 8, 2), "");
  EXPECT_EQ(message(4, 1, 3, 1), "");
  // the constructor refuses alike on every rank, before any communicator is split
  const int U = size_of() + 1;
  EXPECT_THROW((HybridAttention(MPI_COMM_WORLD, U, 64, 8, 4, 16, {16, 24}, test_isa(), Precision::Fp32)),
               Error);
}

}  // namespace
}  // namespace lct
