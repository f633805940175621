// One thread, one kernel path: the fused attention's forward and backward tiles on whole,
// unmasked 132 x 128 blocks of D = 64, as a query block walks its row of key blocks (the
// fp32 forward bringing the next block into L2 as the kernel does). What
// the tiles alone reach, against the same path's peak on the same thread (the FMA probe; for
// the bf16 tiles of avx512_bf16, its vdpbf16ps probe); `lctrain bench attention` measures
// the whole kernel (packing, masks, scheduling, dQ order) on every thread. Counters: GFLOP/s
// (FlashAttention-2 count: 4 rows np D forward, 2.5x backward) and pct_peak. Each is
// repeated 9 times, short: a shared host's slow spells (2-4x, seconds long) fall on a few
// repetitions, so read the median, and the max row's counters as the best repetition's
// rates (its time column is the worst repetition's).
//   taskset -c 0 build/bench/lct_tile_bench [--benchmark_filter=avx2]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/bf16.hpp"
#include "kernels/isa/kernels.hpp"
#include "sys/cpu.hpp"

namespace lct {
namespace {

constexpr int64_t kD = 64, kRows = 132, kKeys = 128;

// The ISA's fp32 FMA (or bf16 dot-product) peak on this thread: the best of a few ~20 ms
// probe windows.
double peak_flops(const IsaKernels& k, bool bf16_products) {
  double best = 0;
  for (int w = 0; w < 8; ++w) {
    const auto t0 = std::chrono::steady_clock::now();
    const double flops = bf16_products ? k.bf16_probe(1 << 22) : k.fma_probe(1 << 23);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, flops / s);
  }
  return best;
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
    for (auto* b : {&dk, &dv}) b->assign(size_t(kKeys * kD), 0.0f);
    for (auto* b : {&p, &ds, &scratch}) b->assign(size_t(kRows * kKeys), 0.0f);
    const std::pair<std::vector<bf16>*, const std::vector<float>*> rounded[] = {
        {&q16, &q}, {&dout16, &dout}, {&kt2, &kt}, {&vt2, &vt}, {&k2, &k}, {&v2, &v}};
    for (auto [to, from] : rounded) {
      to->resize(from->size());
      convert(from->data(), to->data(), int64_t(from->size()));
    }
    for (auto* b : {&p16, &ds16, &pi, &dsi}) b->assign(size_t(kRows * kKeys), bf16{});
  }
};

void forward_row(const IsaKernels& kern, Operands& o) {
  o.m.assign(size_t(kRows), -INFINITY);
  o.l.assign(size_t(kRows), 0.0f);
  std::fill(o.acc.begin(), o.acc.end(), 0.0f);
  FlashFwdTile t;
  t.D = kD, t.rows = kRows, t.np = kKeys, t.ldq = kD, t.q = o.q.data();
  t.acc = o.acc.data(), t.m = o.m.data(), t.l = o.l.data(), t.scratch = o.scratch.data();
  for (int64_t j = 0; j < o.blocks; ++j) {
    t.kt = o.kt.data() + j * kKeys * kD;
    t.v = o.v.data() + j * kKeys * kD;
    const bool last = j + 1 == o.blocks;
    t.next_kt = last ? nullptr : t.kt + kKeys * kD;
    t.next_v = last ? nullptr : t.v + kKeys * kD;
    kern.flash_fwd_tile(t);
  }
}

void backward_row(const IsaKernels& kern, Operands& o) {
  FlashBwdTile t;
  t.D = kD, t.rows = kRows, t.np = kKeys, t.ldq = kD, t.q = o.q.data(), t.dout = o.dout.data();
  t.lse2 = o.lse2.data(), t.delta = o.delta.data(), t.p = o.p.data(), t.ds = o.ds.data();
  t.dq = o.dq.data(), t.dk = o.dk.data(), t.dv = o.dv.data();
  for (int64_t j = 0; j < o.blocks; ++j) {
    t.kt = o.kt.data() + j * kKeys * kD;
    t.vt = o.vt.data() + j * kKeys * kD;
    t.k = o.k.data() + j * kKeys * kD;
    kern.flash_bwd_tile(t);
  }
}

void forward_row_bf16(const IsaKernels& kern, Operands& o) {
  o.m.assign(size_t(kRows), -INFINITY);
  o.l.assign(size_t(kRows), 0.0f);
  std::fill(o.acc.begin(), o.acc.end(), 0.0f);
  FlashFwdTileBf16 t;
  t.D = kD, t.rows = kRows, t.np = kKeys, t.ldq = kD, t.q = o.q16.data();
  t.acc = o.acc.data(), t.m = o.m.data(), t.l = o.l.data();
  t.scores = o.scratch.data(), t.scratch = o.p16.data();
  for (int64_t j = 0; j < o.blocks; ++j) {
    t.kt2 = o.kt2.data() + j * kKeys * kD;
    t.v2 = o.v2.data() + j * kKeys * kD;
    kern.flash_fwd_tile_bf16(t);
  }
}

void backward_row_bf16(const IsaKernels& kern, Operands& o) {
  FlashBwdTileBf16 t;
  t.D = kD, t.rows = kRows, t.np = kKeys, t.ldq = kD;
  t.q = t.q2 = o.q16.data();  // the pairs of rows: same size, values do not matter here
  t.dout = t.dout2 = o.dout16.data();
  t.lse2 = o.lse2.data(), t.delta = o.delta.data(), t.p = o.p.data(), t.ds = o.ds16.data();
  t.pi = o.pi.data(), t.dsi = o.dsi.data(), t.dq = o.dq.data(), t.dk = o.dk.data(), t.dv = o.dv.data();
  for (int64_t j = 0; j < o.blocks; ++j) {
    t.kt2 = o.kt2.data() + j * kKeys * kD;
    t.vt2 = o.vt2.data() + j * kKeys * kD;
    t.k2 = o.k2.data() + j * kKeys * kD;
    kern.flash_bwd_tile_bf16(t);
  }
}

void run(benchmark::State& state, Isa isa, bool bf16_products, bool backward) {
  const IsaKernels* kern = isa_kernels(isa);
  if (!kern || !detect_cpu().runs(isa)) {
    state.SkipWithError("this CPU does not run this kernel path");
    return;
  }
  Operands o(state.range(0));
  const double peak = peak_flops(*kern, bf16_products);
  for (auto _ : state) {
    if (bf16_products) backward ? backward_row_bf16(*kern, o) : forward_row_bf16(*kern, o);
    else backward ? backward_row(*kern, o) : forward_row(*kern, o);
    benchmark::ClobberMemory();
  }
  const double flops = 4.0 * kRows * kKeys * kD * double(o.blocks) * (backward ? 2.5 : 1.0);
  constexpr auto kRate = benchmark::Counter::kIsIterationInvariantRate;  // value x iterations / s
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, kRate);
  state.counters["pct_peak"] = benchmark::Counter(100.0 * flops / peak, kRate);
}

void register_all() {
  // fp32 tiles of every path (avx512_bf16's are avx512's), and avx512_bf16's bf16 tiles.
  const std::pair<Isa, bool> paths[] = {
      {Isa::Avx2, false}, {Isa::Avx512, false}, {Isa::Generic, false}, {Isa::Avx512Bf16, true}};
  for (auto [isa, b16] : paths) {
    if (!isa_kernels(isa)) continue;
    for (bool bwd : {false, true}) {
      const std::string name = std::string(isa_name(isa)) + (b16 ? "/bf16" : "") + (bwd ? "/backward" : "/forward");
      // 4 key blocks (64 KiB an operand) stay in L2; 32 (1 MiB an operand) come from L3.
      benchmark::RegisterBenchmark(name.c_str(), [isa, b16, bwd](benchmark::State& s) { run(s, isa, b16, bwd); })
          ->Arg(4)
          ->Arg(32)
          ->Unit(benchmark::kMicrosecond)
          ->MinTime(0.05)
          ->Repetitions(9)
          ->ReportAggregatesOnly(true)
          ->ComputeStatistics("max", [](const std::vector<double>& v) {
            return *std::max_element(v.begin(), v.end());
          });
    }
  }
}

}  // namespace
}  // namespace lct

int main(int argc, char** argv) {
  lct::register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
