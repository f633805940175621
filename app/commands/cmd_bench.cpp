// lctrain bench attention|gemm: kernel GFLOP/s against the machine's measured peak (FMA peak
// of the widest fp32 ISA, on the run's own threads) and against a large product of the GEMM
// library in use, measured in the same run on the same threads. Medians of --repeats runs.
//   attention  FLOPs the FlashAttention-2 way: forward 4 S^2 D H (halved when causal),
//              backward 2.5x forward
//   gemm       the products of a training step of a model preset at T tokens: every linear
//              layer forward (y = x W^T), backward to the input (dx = dy W) and to the weight
//              (dW += dy^T x), with oneDNN and with OpenBLAS, in fp32 or with bf16 operands
//   peak       the peak probe on every thread at once for --seconds, in ~20 ms windows: the
//              best window (what the peak is) and how far the others fall below it
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <iostream>
#include <type_traits>

#include "app/cli/context.hpp"
#include "common/error.hpp"
#include "common/rng.hpp"
#include "common/stats.hpp"
#include "io/atomic.hpp"
#include "io/timing_file.hpp"
#include "kernels/attention.hpp"
#include "kernels/attention_onednn.hpp"
#include "kernels/gemm.hpp"
#include "kernels/peak_probe.hpp"
#include "model/config.hpp"

namespace lct {

namespace {

void fill_random(Buffer<float>& x, uint64_t stream) {
  float* p = x.data();
  const int64_t n = int64_t(x.size());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) p[i] = float(normal_at(7, stream, uint64_t(i)));
}

struct Table {
  TimingTable data;
  explicit Table(std::initializer_list<const char*> columns) {
    for (const char* c : columns) data.columns.push_back({c, "", "", {}});
  }
  void add(const std::vector<double>& row) {
    for (size_t c = 0; c < data.columns.size(); ++c) data.columns[c].values.push_back(row[c]);
  }
};

void write_table(Context& ctx, const BenchOptions& o, Table& t, double peak, const std::string& how) {
  if (o.out.empty() || !ctx.world.root()) return;
  t.data.summary = {{"peak_gflops", peak}, {"peak_how", how}, {"precision", std::string(precision_name(o.precision))},
                    {"gemm", gemm_description()}, {"isa", std::string(isa_name(ctx.topo.isa))}};
  write_timing_file(o.out, t.data, ctx.provenance(), "bench");
  ctx.out() << "wrote " << o.out << "\n";
}

// Inputs of the bench in the activation type X (float, or bf16 rounded from the same values).
template <class X>
Buffer<X> as_type(Buffer<float>& x) {
  if constexpr (std::is_same_v<X, float>) return std::move(x);
  else {
    Buffer<X> out(x.size());
    convert(x.data(), out.data(), int64_t(x.size()));
    return out;
  }
}

// n values of the bench's random stream `stream`, in the activation type X.
template <class X>
Buffer<X> random_as(size_t n, uint64_t stream) {
  Buffer<float> v(n);
  fill_random(v, stream);
  return as_type<X>(v);
}

// One sequence length's timings.
struct AttnTimed {
  int64_t S;
  double f, fb, g, ws;  // seconds forward, forward+backward; gemm GFLOP/s; workspace MiB
};
// What ran: the fused kernels' ISA, or the tile path and whether its products were on AMX
// (OneDnnAttention::matrix_engine); the products' type.
struct AttnRan {
  Isa isa;
  bool matrix_engine;
  Precision products;
};

// The attention kernel the options select at S tokens (random inputs in the activation type
// X): forward, then forward + backward, medians of --repeats; and a 2048^3 product beside it.
template <class X>
AttnTimed time_attention(const BenchOptions& o, int64_t S, Isa attn_isa, Precision precision, AttnRan& ran) {
  const int64_t H = o.heads, KV = o.kv_heads, D = o.head_dim;
  const size_t nq = size_t(S * H * D), nk = size_t(S * KV * D);
  const Buffer<X> q = random_as<X>(nq, 1), k = random_as<X>(nk, 2), v = random_as<X>(nk, 3),
                  dout = random_as<X>(nq, 4);
  Buffer<float> o_(nq), dq(nq), dk(nk), dv(nk), lse(size_t(H * S)), delta(lse.size());
  Buffer<X> ox(o_.size());
  std::vector<int32_t> idx(static_cast<size_t>(S)), doc(static_cast<size_t>(S), 0);
  for (int64_t i = 0; i < S; ++i) idx[size_t(i)] = o.causal ? int32_t(i) : 0;  // equal idx: no mask
  const TokenTags tags{idx.data(), doc.data()};
  const AttnDims d{S, S, H, KV, D};
  AttnTimed t{S, 0, 0, 0, 0};
  const auto time = [&](auto& kernel) {
    auto forward = [&] { kernel.forward(d, q.data(), k.data(), v.data(), tags, tags, o_.data(), lse.data()); };
    auto both = [&] {
      forward();
      convert(o_.data(), ox.data(), int64_t(o_.size()));  // o as the model keeps it
      attention_delta(ox.data(), dout.data(), S, H, D, delta.data());
      kernel.backward(d, q.data(), k.data(), v.data(), lse.data(), delta.data(), dout.data(), tags,
                      tags, dq.data(), dk.data(), dv.data());
    };
    ran.products = kernel.products();
    t.f = median_seconds(o.repeats, forward);
    t.fb = o.backward ? median_seconds(o.repeats, both) : 0.0;
    t.ws = double(kernel.workspace_bytes()) / double(1 << 20);
  };
  t.g = measure_gemm_gflops(2048, int(o.repeats), precision);
  if (o.attention_kernel == AttnKernel::OneDnn) {
    OneDnnAttention kernel({S, S, H, KV, D}, {o.block_q, o.block_k}, attn_isa, precision);
    ran.matrix_engine = kernel.matrix_engine();
    time(kernel);
  } else {
    FlashAttention kernel({S, S, H, KV, D}, {o.block_q, o.block_k}, attn_isa, precision);
    ran.isa = kernel.isa();
    time(kernel);
  }
  return t;
}

// The timings against the run's peak and the 2048^3 product: a table on rank 0's output and,
// with --out, in a timing file.
void report_attention(Context& ctx, const BenchOptions& o, const std::vector<AttnTimed>& timed,
                      const AttnRan& ran, Precision precision) {
  const int64_t H = o.heads, KV = o.kv_heads, D = o.head_dim;
  std::ostream& out = ctx.out();
  ctx.measure_peak(Context::kProbesBeforeAndAfter);
  const auto [peak, peak_how] = ctx.mfu_peak(precision, 0);
  char line[256];
  std::snprintf(line, sizeof line, "%8s %9s %9s %6s %9s %9s %6s %9s %7s %7s %9s\n", "S", "fwd s",
                "fwd GF/s", "%peak", "f+b s", "f+b GF/s", "%peak", "gemm GF/s", "fwd/gm",
                "f+b/gm", "work MiB");
  out << line;
  Table table({"seq_len", "heads", "kv_heads", "head_dim", "threads", "fwd_s", "fwd_gflops",
               "fwd_peak_frac", "fwdbwd_s", "fwdbwd_gflops", "fwdbwd_peak_frac", "gemm_gflops",
               "fwd_gemm_ratio", "fwdbwd_gemm_ratio", "workspace_mib"});
  for (const auto& [S, f, fb, g, ws] : timed) {
    const double fwd_flops = 4.0 * double(S) * double(S) * double(D) * double(H) * (o.causal ? 0.5 : 1.0);
    const double gf = fwd_flops / f / 1e9, gfb = o.backward ? 3.5 * fwd_flops / fb / 1e9 : 0.0;
    std::snprintf(line, sizeof line, "%8lld %9.3f %9.1f %5.1f%% %9.3f %9.1f %5.1f%% %9.1f %7.2f %7.2f %9.1f\n",
                  (long long)S, f, gf, 100 * gf / peak, fb, gfb, 100 * gfb / peak, g, gf / g,
                  gfb / g, ws);
    out << line;
    table.add({double(S), double(H), double(KV), double(D), double(ctx.topo.threads), f, gf,
               gf / peak, fb, gfb, gfb / peak, g, gf / g, gfb / g, ws});
  }
  out << "FLOPs: forward 4 S^2 D H" << (o.causal ? " / 2 (causal)" : "")
      << ", forward+backward 3.5x that; %peak of " << peak << " GFLOP/s (" << peak_how
      << "); gemm: " << gemm_description() << ", 2048^3 " << precision_name(o.precision)
      << " on the same threads; attention: "
      << (o.attention_kernel == AttnKernel::OneDnn
              ? (ran.matrix_engine ? std::string("tiles, every product on AMX (lctrain's pair products)")
                                   : cat("tiles, every product a oneDNN ", onednn_version(), " matmul"))
              : cat("fused kernels ", isa_name(ran.isa)))
      << ", " << precision_name(o.precision)
      << " inputs, " << precision_name(ran.products) << " products; medians of " << o.repeats << " runs\n";
  write_table(ctx, o, table, peak, peak_how);
}

template <class X>
int bench_attention(Context& ctx, const BenchOptions& o, const std::vector<int64_t>& lens) {
  if (o.heads < 1 || o.kv_heads < 1 || o.heads % o.kv_heads != 0 || o.head_dim < 1)
    fail("bench: --heads must be a positive multiple of --kv-heads, and --head-dim positive");
  const Precision precision = std::is_same_v<X, bf16> ? Precision::Bf16 : Precision::Fp32;
  if (const std::string w = ctx.bf16_warning(precision); !w.empty()) ctx.out() << w << "\n";
  const Isa attn_isa = ctx.attention_isa(precision);
  AttnRan ran{attn_isa, false, precision};
  std::vector<AttnTimed> timed;
  for (const int64_t S : lens) {
    timed.push_back(time_attention<X>(o, S, attn_isa, precision, ran));
    ctx.out() << "timed S = " << S << "\n" << std::flush;
  }
  report_attention(ctx, o, timed, ran, precision);
  return kExitOk;
}

// One linear layer's three products at T tokens, operands of type X (bf16: rounded from the
// same values, as the bf16 copy of the weights and the bf16 activations are in training);
// results and weight gradients fp32.
template <class X>
struct LinearProducts {
  Buffer<X> x, w, dy;  // [T, in], [out, in], [T, out]
  Buffer<float> y, dx, dw;
  LinearProducts(int64_t T, int64_t in, int64_t out)
      : x(random_as<X>(size_t(T * in), 1)), w(random_as<X>(size_t(out * in), 2)), dy(random_as<X>(size_t(T * out), 3)),
        y(size_t(T * out)), dx(size_t(T * in)), dw(size_t(out * in)) {}
};

template <class X>
int bench_gemm(Context& ctx, const BenchOptions& o, const std::vector<int64_t>& lens) {
  const Precision precision = std::is_same_v<X, bf16> ? Precision::Bf16 : Precision::Fp32;
  if (const std::string w = ctx.bf16_warning(precision); !w.empty()) ctx.out() << w << "\n";
  const ModelConfig c = model_preset(o.preset);
  const int64_t C = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t HD = c.num_attention_heads * c.head_dim(), KVD = c.num_key_value_heads * c.head_dim();
  const GemmLib in_use = gemm_lib();
  struct Layer {
    const char* name;
    int64_t in, out;
  };
  const Layer layers[] = {{"q_proj", C, HD}, {"k_proj", C, KVD}, {"o_proj", HD, C},
                          {"gate_proj", C, I}, {"down_proj", I, C}, {"lm_head", C, V}};
  std::ostream& out = ctx.out();
  struct Timed {
    int64_t T;
    size_t layer, product;
    const char* product_name;
    int64_t M, N, K;
    double g[2];  // GFLOP/s: oneDNN, OpenBLAS
  };
  std::vector<Timed> timed;
  for (const int64_t T : lens) {
    for (size_t li = 0; li < std::size(layers); ++li) {
      const Layer& L = layers[li];
      LinearProducts<X> b(T, L.in, L.out);
      struct Product {
        const char* name;
        std::function<void()> run;
        int64_t M, N, K;
      };
      const Product products[] = {
          {"forward", [&] { linear_forward(b.y.data(), b.x.data(), b.w.data(), T, L.in, L.out); }, T, L.out, L.in},
          {"dinput", [&] { linear_backward_input(b.dx.data(), b.dy.data(), b.w.data(), T, L.in, L.out, false); },
           T, L.in, L.out},
          {"dweight", [&] { linear_backward_weight(b.dw.data(), b.dy.data(), b.x.data(), T, L.in, L.out); }, L.out,
           L.in, T}};
      for (size_t pi = 0; pi < std::size(products); ++pi) {
        const Product& p = products[pi];
        const double flops = 2.0 * double(p.M) * double(p.N) * double(p.K);
        double g[2];
        for (GemmLib lib : {GemmLib::OneDnn, GemmLib::OpenBlas}) {
          gemm_setup(lib, ctx.topo.isa, true);  // each library on every product
          g[int(lib)] = flops / median_seconds(o.repeats, p.run) / 1e9;
        }
        timed.push_back({T, li, pi, p.name, p.M, p.N, p.K, {g[0], g[1]}});
      }
    }
    out << "timed T = " << T << "\n" << std::flush;
  }
  gemm_setup(in_use, ctx.topo.isa);
  ctx.measure_peak(Context::kProbesBeforeAndAfter);
  const auto [peak, peak_how] = ctx.mfu_peak(precision, 0);
  char line[256];
  std::snprintf(line, sizeof line, "%7s %-10s %-8s %6s %6s %6s %11s %6s %11s %6s\n", "T", "layer",
                "product", "M", "N", "K", "oneDNN GF/s", "%peak", "OpenBLAS", "%peak");
  out << line;
  Table table({"tokens", "layer", "product", "M", "N", "K", "onednn_gflops", "onednn_peak_frac",
               "openblas_gflops", "openblas_peak_frac"});
  for (const Timed& t : timed) {
    std::snprintf(line, sizeof line, "%7lld %-10s %-8s %6lld %6lld %6lld %11.1f %5.1f%% %11.1f %5.1f%%\n",
                  (long long)t.T, layers[t.layer].name, t.product_name, (long long)t.M, (long long)t.N,
                  (long long)t.K, t.g[0], 100 * t.g[0] / peak, t.g[1], 100 * t.g[1] / peak);
    out << line;
    table.add({double(t.T), double(t.layer), double(t.product), double(t.M), double(t.N), double(t.K),
               t.g[0], t.g[0] / peak, t.g[1], t.g[1] / peak});
  }
  out << "model " << o.preset << " (C " << C << ", I " << I << ", V " << V << ", q " << HD << ", kv "
      << KVD << "); " << precision_name(precision) << " operands, fp32 results"
      << (precision == Precision::Bf16 ? " (OpenBLAS: operands widened to fp32, as --gemm openblas trains)" : "")
      << "; %peak of " << peak << " GFLOP/s (" << peak_how << "); OpenBLAS " << openblas_kernels()
      << " kernels; medians of " << o.repeats << " runs\n";
  if (in_use == GemmLib::OneDnn && gemm_weight_grads_lib() == GemmLib::OpenBlas)
    out << "training runs " << gemm_description() << ": its dweight rows are the OpenBLAS column\n";
  write_table(ctx, o, table, peak, peak_how);
  return kExitOk;
}

// The value a fraction f of the way from the least to the greatest of v (sorted).
double quantile(const std::vector<double>& sorted, double f) {
  return sorted[size_t(f * double(sorted.size() - 1) + 0.5)];
}

// The peak probe's windows on rank 0's threads: the best (what a peak measurement takes) and
// the rest against it. On a shared host the mean is what its cores deliver, the ceiling of
// every MFU and %peak figure measured there.
int bench_peak(Context& ctx, const BenchOptions& o) {
  const ProbeWindows w = probe_windows(ctx.topo.cpu, ctx.topo.isa, o.precision == Precision::Bf16,
                                       ctx.topo.threads, o.seconds);
  std::vector<double> all = w.all;
  std::sort(all.begin(), all.end());
  const double best = all.back();
  std::ostream& out = ctx.out();
  char line[160];
  out << all.size() << " windows of about 20 ms over " << o.seconds << " s, " << w.how
      << (ctx.world.size > 1 ? " (rank 0's)" : "") << "; GFLOP/s, and against the best window:\n";
  const std::pair<const char*, double> rows[] = {{"best", best},           {"mean", mean(all)},
                                                 {"median", median(all)},  {"25th percentile", quantile(all, 0.25)},
                                                 {"10th percentile", quantile(all, 0.1)}, {"slowest", all.front()}};
  for (const auto& [name, v] : rows) {
    std::snprintf(line, sizeof line, "  %-16s %9.1f %6.1f%%\n", name, v, 100 * v / best);
    out << line;
  }
  Table table({"window", "gflops"});
  for (size_t i = 0; i < w.all.size(); ++i) table.add({double(i), w.all[i]});
  for (size_t t = 0; t < w.thread.size(); ++t) {
    const std::vector<double>& x = w.thread[t];
    const double m = mean(x), top = *std::max_element(x.begin(), x.end());
    std::snprintf(line, sizeof line, "  thread %zu: mean %.1f of its best %.1f (%.1f%%)\n", t, m, top, 100 * m / top);
    out << line;
    table.data.columns.push_back({cat("thread", t, "_gflops"), "", "", x});
  }
  out << "The mean against the best is the share of the peak these cores delivered: %peak and MFU "
         "figures measured here over a like time sit below it.\n";
  write_table(ctx, o, table, best, w.how);
  return kExitOk;
}

}  // namespace

int cmd_bench_ring(Context& ctx);

int cmd_bench(Context& ctx) {
  const BenchOptions& o = ctx.inv.bench;
  if (o.what == BenchWhat::Ring) return cmd_bench_ring(ctx);
  ctx.print_startup("bench " + name_of(bench_choices(), o.what), true);
  if (o.repeats < 1) fail("bench: --repeats must be at least 1");
  const std::vector<int64_t> lens = parse_int_list(o.seq_lens, "--seq-len");
  if (!o.out.empty()) check_can_write(o.out, o.force, "bench output");  // before an hour of work
  if (o.what == BenchWhat::Peak) return bench_peak(ctx, o);
  ctx.measure_peak();
  if (o.what == BenchWhat::Gemm)
    return o.precision == Precision::Bf16 ? bench_gemm<bf16>(ctx, o, lens) : bench_gemm<float>(ctx, o, lens);
  return o.precision == Precision::Bf16 ? bench_attention<bf16>(ctx, o, lens) : bench_attention<float>(ctx, o, lens);
}

}  // namespace lct
