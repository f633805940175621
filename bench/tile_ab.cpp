// Two builds of the attention tiles in one process (bench/tile_ab.sh): A and B take turns,
// one row of key blocks each, and each pair's B/A speed ratio is kept. A shared host's speed
// drifts by 10-20% over seconds; within a pair (a millisecond) both builds see the same, so
// the median ratio resolves differences of 1%, which separate runs of lct_tile_bench do not.
//   tile_ab [pairs] [filter]     e.g. tile_ab 300 bf16
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tile_ab.hpp"
#include "tile_rows.hpp"

namespace lct::tile_ab {
namespace {

using Row = std::function<void(Operands&)>;

double seconds(const Row& row, Operands& o) {
  const auto t0 = std::chrono::steady_clock::now();
  row(o);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[size_t(q * double(v.size() - 1) + 0.5)];
}

// pairs alternating which build goes first; prints medians and the B/A speed ratio.
void compare(const std::string& name, Operands& o, bool backward, const Row& a, const Row& b, int pairs) {
  for (int i = 0; i < 5; ++i) a(o), b(o);  // warm caches and clocks
  std::vector<double> ta, tb, speed;
  for (int i = 0; i < pairs; ++i) {
    double x, y;
    if (i % 2) x = seconds(a, o), y = seconds(b, o);
    else y = seconds(b, o), x = seconds(a, o);
    ta.push_back(x), tb.push_back(y), speed.push_back(x / y);
  }
  const double flops = row_flops(o.blocks, backward);
  const long faster = std::count_if(speed.begin(), speed.end(), [](double s) { return s > 1; });
  std::printf("%-24s A %7.1f  B %7.1f GFLOP/s   B/A %.3f  (quartiles %.3f-%.3f, B faster in %ld of %d)\n",
              name.c_str(), flops / quantile(ta, 0.5) / 1e9, flops / quantile(tb, 0.5) / 1e9,
              quantile(speed, 0.5), quantile(speed, 0.25), quantile(speed, 0.75), faster, pairs);
}

template <class Fn, class RowOf>
Row row_of(Fn fn, RowOf row) {
  return [fn, row](Operands& o) { row(o, fn); };
}

void run(int pairs, const std::string& filter) {
  struct Path {
    const char* name;
    bool runs;
    TileFns a, b;
  };
  const Path paths[] = {{"avx512", __builtin_cpu_supports("avx512bf16") != 0, fns_a512(), fns_b512()},
                        {"avx2", __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"), fns_a2(), fns_b2()}};
  for (const Path& p : paths) {
    if (!p.runs) continue;  // (the avx512 build is avx512_bf16's: it needs AVX512_BF16)
    for (int64_t blocks : {4, 32}) {
      Operands o(blocks);
      auto go = [&](const char* what, bool backward, const Row& a, const Row& b) {
        const std::string name = std::string(p.name) + "/" + what + "/" + std::to_string(blocks);
        if (name.find(filter) != std::string::npos) compare(name, o, backward, a, b, pairs);
      };
      auto fwd = [](Operands& o, auto fn) { forward_row(o, fn); };
      auto bwd = [pad = p.b.p_pad](Operands& o, auto fn) { backward_row(o, fn, pad); };
      go("forward", false, row_of(p.a.fwd, fwd), row_of(p.b.fwd, fwd));
      go("backward", true, row_of(p.a.bwd, bwd), row_of(p.b.bwd, bwd));
      if (!p.a.fwd16) continue;
      auto fwd16 = [](Operands& o, auto fn) { forward_row_bf16(o, fn); };
      auto bwd16 = [](Operands& o, auto fn) { backward_row_bf16(o, fn); };
      go("bf16/forward", false, row_of(p.a.fwd16, fwd16), row_of(p.b.fwd16, fwd16));
      go("bf16/backward", true, row_of(p.a.bwd16, bwd16), row_of(p.b.bwd16, bwd16));
    }
  }
}

}  // namespace
}  // namespace lct::tile_ab

int main(int argc, char** argv) {
  const int pairs = argc > 1 ? std::atoi(argv[1]) : 300;
  lct::tile_ab::run(pairs > 0 ? pairs : 300, argc > 2 ? argv[2] : "");
  return 0;
}
