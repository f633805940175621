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

#include "tile_rows.hpp"
#include "kernels/isa/kernels.hpp"
#include "sys/cpu.hpp"

namespace lct {
namespace {

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

void run(benchmark::State& state, Isa isa, bool bf16_products, bool backward) {
  const IsaKernels* kern = isa_kernels(isa);
  if (!kern || !detect_cpu().runs(isa)) {
    state.SkipWithError("this CPU does not run this kernel path");
    return;
  }
  Operands o(state.range(0));
  const double peak = peak_flops(*kern, bf16_products);
  for (auto _ : state) {
    if (bf16_products && backward) backward_row_bf16(o, [&](const auto& t) { kern->flash_bwd_tile_bf16(t); });
    else if (bf16_products) forward_row_bf16(o, [&](const auto& t) { kern->flash_fwd_tile_bf16(t); });
    else if (backward) backward_row(o, [&](const auto& t) { kern->flash_bwd_tile(t); }, kern->p_pad);
    else forward_row(o, [&](const auto& t) { kern->flash_fwd_tile(t); });
    benchmark::ClobberMemory();
  }
  const double flops = row_flops(o.blocks, backward);
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
