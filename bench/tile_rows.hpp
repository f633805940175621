// One query block walking its row of key blocks through the fused attention's tiles, for
// the tile benchmarks (tiles.cpp, tile_ab.cpp): whole, unmasked 132 x 128 blocks of D = 64,
// the fp32 forward bringing the next block into L2 as the kernel does, and each key block
// adding into its own dK and dV as a run of the kernel's backward does (one shared pair stayed
// in L2 and read 4.7% faster at 32 key blocks on Zen 3). tile(t) runs one tile.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "common/bf16.hpp"
#include "kernels/isa/kernels.hpp"

namespace lct {

constexpr int64_t kD = 64, kRows = 132, kKeys = 128;

// FLOPs of one row (FlashAttention-2 count: 4 rows np D forward, 2.5x backward).
inline double row_flops(int64_t blocks, bool backward) {
  return 4.0 * kRows * kKeys * kD * double(blocks) * (backward ? 2.5 : 1.0);
}

// Operands of one query block and `blocks` key blocks, as a query block walks its row.
// The bf16 tiles take the same values rounded, in their layouts (flash_tiles_bf16.hpp),
// which have the fp32 ones' sizes.
struct Operands {
  std::vector<float> q, dout, kt, vt, k, v, lse2, delta, acc, m, l, scratch, p, ds, dq, dk, dv;
  std::vector<bf16> q16, dout16, kt2, vt2, k2, v2, p16, ds16, pi, dsi;
  int64_t blocks;
  explicit Operands(int64_t nblocks) : blocks(nblocks) {
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    auto fill = [&](std::vector<float>& x, size_t n, float scale) {
      x.resize(n);
      for (float& e : x) e = scale * u(gen);
    };
    fill(q, size_t(kRows * kD), 1.0f);
    fill(dout, size_t(kRows * kD), 1.0f);
    for (auto* b : {&kt, &vt, &k, &v}) fill(*b, size_t(blocks * kKeys * kD), 0.2f);
    lse2.assign(size_t(kRows), 8.0f);
    delta.assign(size_t(kRows), 0.1f);
    for (auto* b : {&acc, &dq}) b->assign(size_t(kRows * kD), 0.0f);
    for (auto* b : {&dk, &dv}) b->assign(size_t(blocks * kKeys * kD), 0.0f);  // a key block's each
    for (auto* b : {&p, &ds, &scratch}) b->assign(size_t(kRows * (kKeys + kMaxPPad)), 0.0f);
    const std::pair<std::vector<bf16>*, const std::vector<float>*> rounded[] = {
        {&q16, &q}, {&dout16, &dout}, {&kt2, &kt}, {&vt2, &vt}, {&k2, &k}, {&v2, &v}};
    for (auto [to, from] : rounded) {
      to->resize(from->size());
      // convert()'s bits, inline: tile_ab.sh builds without lct_core
      for (size_t i = 0; i < from->size(); ++i) (*to)[i] = to_bf16((*from)[i]);
    }
    for (auto* b : {&p16, &ds16, &pi, &dsi}) b->assign(size_t(kRows * kKeys), bf16{});
  }
  void start_forward() {  // a query block's running max, sum and output before its first tile
    m.assign(size_t(kRows), -INFINITY);
    l.assign(size_t(kRows), 0.0f);
    std::fill(acc.begin(), acc.end(), 0.0f);
  }
};

template <class Tile>
void forward_row(Operands& o, Tile&& tile) {
  o.start_forward();
  FlashFwdTile t;
  t.D = kD, t.rows = kRows, t.np = kKeys, t.ldq = kD, t.q = o.q.data();
  t.acc = o.acc.data(), t.m = o.m.data(), t.l = o.l.data(), t.scratch = o.scratch.data();
  for (int64_t j = 0; j < o.blocks; ++j) {
    t.kt = o.kt.data() + j * kKeys * kD;
    t.v = o.v.data() + j * kKeys * kD;
    const bool last = j + 1 == o.blocks;
    t.next_kt = last ? nullptr : t.kt + kKeys * kD;
    t.next_v = last ? nullptr : t.v + kKeys * kD;
    tile(t);
  }
}

template <class Tile>  // p_pad: the tile's ISA's (IsaKernels::p_pad)
void backward_row(Operands& o, Tile&& tile, int p_pad) {
  FlashBwdTile t;
  t.D = kD, t.rows = kRows, t.np = kKeys, t.ldq = kD, t.q = o.q.data(), t.dout = o.dout.data();
  t.lse2 = o.lse2.data(), t.delta = o.delta.data(), t.p = o.p.data(), t.ds = o.ds.data();
  t.ldp = kKeys + p_pad;
  t.dq = o.dq.data();
  for (int64_t j = 0; j < o.blocks; ++j) {
    const int64_t at = j * kKeys * kD;
    t.kt = o.kt.data() + at, t.vt = o.vt.data() + at, t.k = o.k.data() + at;
    t.dk = o.dk.data() + at, t.dv = o.dv.data() + at;
    tile(t);
  }
}

template <class Tile>
void forward_row_bf16(Operands& o, Tile&& tile) {
  o.start_forward();
  FlashFwdTileBf16 t;
  t.D = kD, t.rows = kRows, t.np = kKeys, t.ldq = kD, t.q = o.q16.data();
  t.acc = o.acc.data(), t.m = o.m.data(), t.l = o.l.data();
  t.scores = o.scratch.data(), t.scratch = o.p16.data();
  for (int64_t j = 0; j < o.blocks; ++j) {
    t.kt2 = o.kt2.data() + j * kKeys * kD;
    t.v2 = o.v2.data() + j * kKeys * kD;
    tile(t);
  }
}

template <class Tile>
void backward_row_bf16(Operands& o, Tile&& tile) {
  FlashBwdTileBf16 t;
  t.D = kD, t.rows = kRows, t.np = kKeys, t.ldq = kD;
  t.q = t.q2 = o.q16.data();  // the pairs of rows: same size, values do not matter here
  t.dout = t.dout2 = o.dout16.data();
  t.lse2 = o.lse2.data(), t.delta = o.delta.data(), t.p = o.p.data(), t.ds = o.ds16.data();
  t.pi = o.pi.data(), t.dsi = o.dsi.data(), t.dq = o.dq.data();
  for (int64_t j = 0; j < o.blocks; ++j) {
    const int64_t at = j * kKeys * kD;
    t.kt2 = o.kt2.data() + at, t.vt2 = o.vt2.data() + at, t.k2 = o.k2.data() + at;
    t.dk = o.dk.data() + at, t.dv = o.dv.data() + at;
    tile(t);
  }
}

}  // namespace lct
