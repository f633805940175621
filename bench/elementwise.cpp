// SwiGLU's element-wise forward and backward (kernels/layers.hpp) on every thread, for each
// kernel path the CPU runs, in fp32 and bf16: one call over the gate and up of a 30m MLP at
// 4,096 tokens (4,096 x 1,408 values), as a training step makes them. Counters: values per
// nanosecond and the bytes read and written per second (what the arrays cost to stream).
// Repeated 9 times; read the median (a shared host's slow spells fall on a few repetitions).
//   build/bench/lct_elementwise_bench [--benchmark_filter=bf16]
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "common/bf16.hpp"
#include "kernels/isa/kernels.hpp"
#include "kernels/layers.hpp"
#include "sys/cpu.hpp"

namespace lct {
namespace {

constexpr int64_t kValues = 4096 * 1408;

template <class X>
void run(benchmark::State& state, Isa isa, bool backward) {
  if (!isa_kernels(isa) || !detect_cpu().runs(isa)) {
    state.SkipWithError("this CPU does not run this kernel path");
    return;
  }
  std::mt19937 gen(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<X> gate(kValues), up(kValues), dh(kValues), out(kValues), out2(kValues);
  for (int64_t i = 0; i < kValues; ++i) {
    store_as(&gate[size_t(i)], nd(gen));
    store_as(&up[size_t(i)], nd(gen));
    store_as(&dh[size_t(i)], nd(gen));
  }
  for (auto _ : state) {
    if (backward) swiglu_backward(isa, out.data(), out2.data(), dh.data(), gate.data(), up.data(), kValues);
    else swiglu_forward(isa, out.data(), gate.data(), up.data(), kValues);
    benchmark::ClobberMemory();
  }
  const double arrays = backward ? 5 : 3;  // read gate, up (and dh); write h (or dgate and dup)
  constexpr auto kRate = benchmark::Counter::kIsIterationInvariantRate;
  state.counters["values/ns"] = benchmark::Counter(double(kValues) * 1e-9, kRate);
  state.counters["GB/s"] = benchmark::Counter(double(kValues) * arrays * sizeof(X) * 1e-9, kRate);
}

void register_all() {
  for (Isa isa : kIsas)
    for (bool b16 : {false, true})
      for (bool bwd : {false, true}) {
        const std::string name =
            std::string(isa_name(isa)) + (b16 ? "/bf16" : "/fp32") + (bwd ? "/swiglu_backward" : "/swiglu_forward");
        auto fn = [isa, b16, bwd](benchmark::State& s) { b16 ? run<bf16>(s, isa, bwd) : run<float>(s, isa, bwd); };
        benchmark::RegisterBenchmark(name.c_str(), fn)
            ->Unit(benchmark::kMillisecond)
            ->MinTime(0.05)
            ->Repetitions(9)
            ->ReportAggregatesOnly(true)
            ->UseRealTime();
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
