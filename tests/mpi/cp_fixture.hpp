// What the context-parallel attention tests share: a whole micro-batch with its single-rank
// flash results (causal, packed documents, mostly padding; GQA; fp32 or bf16; a sliding
// window), one rank's shard run through a cp attention, and the comparison of the two.
#pragma once
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <type_traits>

#include "model/shard.hpp"
#include "parallel/hybrid_attention.hpp"
#include "parallel/ring_attention.hpp"
#include "parallel/ulysses_attention.hpp"
#include "test_isa.hpp"

namespace lct::cptest {

inline int rank_of() { int r; MPI_Comm_rank(MPI_COMM_WORLD, &r); return r; }
inline int size_of() { int n; MPI_Comm_size(MPI_COMM_WORLD, &n); return n; }

// LongTail: sequence 0 one document, sequence 1 short ones: the work of the two differs
// about tenfold (what model/balance.hpp evens out).
enum class Layout { Causal, Documents, MostlyPadding, LongTail };

struct Full {  // the whole micro-batch and its single-rank results
  int64_t B, S, T, H, KV, D;
  Precision precision;
  std::vector<float> q, k, v, dout, o, lse, dq, dk, dv;
  std::vector<int32_t> idx, doc;
  int64_t window = 0;
};

inline std::vector<bf16> to_bf16(const std::vector<float>& x) {
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

inline Full make_full(Layout layout, int64_t H, int64_t KV, uint32_t seed, int perturb_doc = -1,
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
      const bool whole = layout == Layout::Causal || (layout == Layout::LongTail && b == 0);
      const int64_t len = whole ? real : std::min<int64_t>(real - t, 1 + 2 * (gen() % (layout == Layout::LongTail ? 12 : 40)));
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
  int ring_steps = 0;     // the ring's plan (RingAttention, HybridAttention)
  size_t bytes_sent = 0;
};

// Op on cp = world-size ranks over this rank's shard of f (hybrid: U Ulysses ranks per
// ring position, sharded by ring position), or over `rows` (the stream indices it holds).
template <class Op>
Local run_parallel(const Full& f, CpTransport transport = CpTransport::Auto,
                   CpSplit split = CpSplit::Zigzag, int U = 1, const std::vector<int64_t>* rows = nullptr) {
  const int N = size_of(), r = rank_of();
  Local L;
  L.rows = rows ? *rows : shard_indices(f.B, f.S, N, r, split, std::is_same_v<Op, HybridAttention> ? U : 1);
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
    else if constexpr (std::is_same_v<Op, HybridAttention>)
      return Op(MPI_COMM_WORLD, U, Tl, f.H, f.KV, f.D, {16, 24}, test_isa(), f.precision, transport);
    else
      return Op(MPI_COMM_WORLD, Tl, f.H, f.KV, f.D, {16, 24}, test_isa(), f.precision);
  };
  Op op = make();
  const AttnDims d{Tl, Tl, f.H, f.KV, f.D, f.window};
  const TokenTags tags{idx.data(), doc.data()};
  op.new_tokens(tags, Tl, f.window);
  if constexpr (std::is_same_v<Op, RingAttention>) L.ring_steps = op.steps();
  if constexpr (std::is_same_v<Op, HybridAttention>) L.ring_steps = op.ring().steps();
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
  L.bytes_sent = op.bytes_sent();
  return L;
}

// max |local - full rows| / max |full|, per tensor; lse rows live at [h, t].
inline void compare(const Full& f, const Local& L, const std::string& what) {
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
  // bf16: each ring step rounds its own p (the running max differs from the whole
  // sequence's), so the shards agree with one rank to bf16's precision, not fp32's.
  const double bound = f.precision == Precision::Bf16 ? 1e-2 : 1e-5;
  for (double w : worst) EXPECT_LT(w, bound) << what;
}

// The same bits in every output (e.g. one exchange over two transports).
inline void expect_bitwise_equal(const Local& a, const Local& b) {
  EXPECT_EQ(a.o, b.o);
  EXPECT_EQ(a.lse, b.lse);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dv, b.dv);
}

}  // namespace lct::cptest
