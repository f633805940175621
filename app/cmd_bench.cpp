// lctrain bench attention: flash attention GFLOP/s beside OpenBLAS sgemm GFLOP/s measured
// in the same run on the same threads. FLOPs the FlashAttention-2 way: forward 4 S^2 D H
// (halved when causal), backward 2.5x forward. Medians of --repeats runs.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "app/context.hpp"
#include "common/error.hpp"
#include "common/stats.hpp"
#include "common/rng.hpp"
#include "io/atomic.hpp"
#include "io/timing_file.hpp"
#include "kernels/attention.hpp"
#include "kernels/gemm.hpp"

namespace lct {

namespace {

void fill_random(Buffer<float>& x, uint64_t stream) {
  float* p = x.data();
  const int64_t n = int64_t(x.size());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) p[i] = float(normal_at(7, stream, uint64_t(i)));
}

}  // namespace

int cmd_bench_ring(Context& ctx);

int cmd_bench(Context& ctx) {
  const BenchOptions& o = ctx.inv.bench;
  if (o.what == "ring") return cmd_bench_ring(ctx);
  ctx.print_startup("bench " + o.what, true);
  if (o.heads < 1 || o.kv_heads < 1 || o.heads % o.kv_heads != 0 || o.head_dim < 1 || o.repeats < 1)
    fail("bench: --heads must be a positive multiple of --kv-heads, --head-dim and --repeats positive");
  const std::vector<int64_t> lens = parse_int_list(o.seq_lens, "--seq-len");
  if (!o.out.empty()) check_can_write(o.out, o.force, "bench output");  // before an hour of work
  const int threads = ctx.topo.threads;
  const int64_t H = o.heads, KV = o.kv_heads, D = o.head_dim;
  std::ostream& out = ctx.out();
  char line[256];
  std::snprintf(line, sizeof line, "%8s %10s %10s %10s %10s %10s %8s %8s %10s\n", "S", "fwd s",
                "fwd GF/s", "f+b s", "f+b GF/s", "sgemm GF/s", "fwd/sg", "f+b/sg", "work MiB");
  out << line << std::flush;

  TimingTable table;
  for (const char* c : {"seq_len", "heads", "kv_heads", "head_dim", "threads", "fwd_s", "fwd_gflops",
                        "fwdbwd_s", "fwdbwd_gflops", "sgemm_gflops", "fwd_ratio", "fwdbwd_ratio",
                        "workspace_mib"})
    table.columns.push_back({c, "", "", {}});
  for (const int64_t S : lens) {
    Buffer<float> q(size_t(S * H * D)), k(size_t(S * KV * D)), v(k.size()), o_(q.size()),
        dout(q.size()), dq(q.size()), dk(k.size()), dv(k.size()), lse(size_t(H * S)), delta(lse.size());
    fill_random(q, 1);
    fill_random(k, 2);
    fill_random(v, 3);
    fill_random(dout, 4);
    std::vector<int32_t> idx(static_cast<size_t>(S)), doc(static_cast<size_t>(S), 0);
    for (int64_t i = 0; i < S; ++i) idx[size_t(i)] = o.causal ? int32_t(i) : 0;  // equal idx: no mask
    const TokenTags tags{idx.data(), doc.data()};
    const AttnDims d{S, S, H, KV, D};
    FlashAttention flash({S, S, H, KV, D}, {o.block_q, o.block_k}, ctx.topo.isa);
    const double fwd_flops = 4.0 * double(S) * double(S) * double(D) * double(H) * (o.causal ? 0.5 : 1.0);

    std::vector<double> tf, tb, sg;
    for (int64_t r = 0; r <= o.repeats; ++r) {  // run 0 warms up and is not counted
      const double g = measure_gemm_gflops(2048, 1);
      double t0 = omp_get_wtime();
      flash.forward(d, q.data(), k.data(), v.data(), tags, tags, o_.data(), lse.data());
      const double f = omp_get_wtime() - t0;
      double b = 0;
      if (o.backward) {
        t0 = omp_get_wtime();
        attention_delta(o_.data(), dout.data(), S, H, D, delta.data());
        flash.backward(d, q.data(), k.data(), v.data(), lse.data(), delta.data(), dout.data(), tags,
                       tags, dq.data(), dk.data(), dv.data());
        b = omp_get_wtime() - t0;
      }
      if (r == 0) continue;
      tf.push_back(f);
      tb.push_back(f + b);
      sg.push_back(g);
    }
    const double f = median(tf), fb = median(tb), g = median(sg);
    const double gf = fwd_flops / f / 1e9, gfb = o.backward ? 3.5 * fwd_flops / fb / 1e9 : 0.0;
    const double ws = double(flash.workspace_bytes()) / double(1 << 20);
    std::snprintf(line, sizeof line, "%8lld %10.3f %10.1f %10.3f %10.1f %10.1f %8.2f %8.2f %10.1f\n",
                  (long long)S, f, gf, fb, gfb, g, gf / g, gfb / g, ws);
    out << line << std::flush;
    const double row[] = {double(S), double(H), double(KV), double(D), double(threads), f, gf,
                          fb, gfb, g, gf / g, gfb / g, ws};
    for (size_t c = 0; c < table.columns.size(); ++c) table.columns[c].values.push_back(row[c]);
  }
  out << "FLOPs: forward 4 S^2 D H" << (o.causal ? " / 2 (causal)" : "")
      << ", forward+backward 3.5x that; sgemm: OpenBLAS 2048^3 on " << threads
      << " threads, measured before each repetition; medians of " << o.repeats << " runs\n";
  if (!o.out.empty() && ctx.world.root()) {
    write_timing_file(o.out, table, ctx.provenance(), "bench");
    out << "wrote " << o.out << "\n";
  }
  return kExitOk;
}

}  // namespace lct
