#include "app/commands/plan_calibration.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/error.hpp"
#include "common/rng.hpp"
#include "common/stats.hpp"
#include "kernels/attention.hpp"
#include "model/flops.hpp"
#include "model/llama.hpp"
#include "train/optimizer.hpp"

namespace lct {

namespace {

// FLOPs one probe may take on one thread: about half a second at a core's fp32 speed, so
// that products run at speed without a large model's full size making plan wait minutes.
constexpr double kProbeFlops = 2.5e10;

// Timed repeats of one probe: their median, and the spread that calibration_warning reads.
struct Repeats {
  std::vector<double> seconds;
  double median() const { return lct::median(seconds); }
  double spread() const {
    const auto [lo, hi] = std::minmax_element(seconds.begin(), seconds.end());
    return median() > 0 ? (*hi - *lo) / median() : 0;
  }
};

// Two timed runs of f, after an untimed one (caches, JIT kernels) unless `warm`.
template <class F>
Repeats repeat(F&& f, bool warm = false) {
  Repeats r;
  for (int i = warm ? 1 : 0; i <= 2; ++i) {
    const double t0 = omp_get_wtime();
    f();
    if (i > 0) r.seconds.push_back(omp_get_wtime() - t0);
  }
  return r;
}

// One document of T random tokens.
Batch calibration_batch(const ModelConfig& mc, int64_t T) {
  Batch b;
  b.B = 1;
  b.S = T;
  for (int64_t i = 0; i < T; ++i) {
    b.tokens.push_back(int32_t(mix64(uint64_t(i) + 1) % uint64_t(mc.vocab_size)));
    b.doc.push_back(0);
    b.idx.push_back(int32_t(i));
    b.pos.push_back(int32_t(i));
  }
  for (int64_t i = 0; i < T; ++i) b.targets.push_back(i + 1 < T ? b.tokens[size_t(i + 1)] : -1);
  return b;
}

struct PassSeconds {
  double fwd_bwd = 0, fwd = 0;  // attention's time taken out of both
  double spread = 0;
};

// mc (one layer, the reduced vocabulary) on T tokens: median seconds of forward+backward and
// of forward, without attention's share (the clock's attention phases).
PassSeconds time_passes(const ModelConfig& mc, int64_t T, const Context& ctx, Precision p) {
  const ModelShape shape{T, T, Checkpointing::None, {128, 128}, ctx.attention_isa(p), p};
  LlamaModel model(mc, shape);
  // Small weights of no particular distribution: the time does not depend on them, and
  // drawing a large layer's from the initialiser's generator took seconds.
  float* w = model.params();
  for (int64_t i = 0; i < int64_t(model.layout().total); ++i) w[i] = 0.002f * float(int(i % 17) - 8);
  const Batch b = calibration_batch(mc, T);
  PhaseClock clock;
  auto attn = [&] { return clock.seconds[size_t(Phase::AttnFwd)] + clock.seconds[size_t(Phase::AttnBwd)]; };
  std::vector<double> a, af;
  const Repeats both = repeat([&] {
    model.zero_grads();
    clock.reset();
    model.forward_backward(b, 1.0f / float(T), clock);
    a.push_back(attn());
  });
  const Repeats fwd = repeat([&] {  // warm from the passes above
    clock.reset();
    model.forward(b, clock);
    af.push_back(clock.seconds[size_t(Phase::AttnFwd)]);
  }, true);
  return {both.median() - median(a), fwd.median() - median(af), std::max(both.spread(), fwd.spread())};
}

// Attention alone at a length where most tiles are full (long contexts are made of them):
// 4,096 tokens, fewer for many wide heads. Seconds per visible pair, and forward's share.
void measure_attention(const ModelConfig& mc, const Context& ctx, Precision p, Calibration& c) {
  const int64_t H = mc.num_attention_heads, KV = mc.num_key_value_heads, D = mc.head_dim();
  int64_t S = 4096;
  while (S > 1024 && 2.0 * double(S) * double(S) * double(H * D) > kProbeFlops) S /= 2;
  FlashAttention flash({S, S, H, KV, D}, {128, 128}, ctx.attention_isa(p), p);
  Buffer<float> q(size_t(S * H * D)), k(size_t(S * KV * D)), v(k.size()), o(q.size()), lse(size_t(H * S)),
      delta(lse.size()), dq(q.size()), dk(k.size()), dv(k.size());
  for (Buffer<float>* x : {&q, &k, &v, &o})
    for (size_t i = 0; i < x->size(); ++i) (*x)[i] = float(normal_at(5, uint64_t(x->size()), i));
  std::vector<int32_t> idx(static_cast<size_t>(S)), doc(static_cast<size_t>(S), 0);
  for (int64_t i = 0; i < S; ++i) idx[size_t(i)] = int32_t(i);
  const AttnDims d{S, S, H, KV, D, 0};
  const TokenTags t{idx.data(), doc.data()};
  const Repeats fwd = repeat([&] { flash.forward(d, q.data(), k.data(), v.data(), t, t, o.data(), lse.data()); });
  attention_delta(o.data(), q.data(), S, H, D, delta.data());
  for (Buffer<float>* x : {&dq, &dk, &dv}) std::fill(x->data(), x->data() + x->size(), 0.0f);
  // Its buffers touched and the kernels' workspace warmed by the forward runs: no untimed run.
  const Repeats bwd = repeat([&] {
    flash.backward(d, q.data(), k.data(), v.data(), lse.data(), delta.data(), q.data(), t, t, dq.data(),
                   dk.data(), dv.data());
  }, true);
  c.rates.attn_pair_s = (fwd.median() + bwd.median()) / sequence_pairs(S, 0);
  c.rates.attn_fwd_share = fwd.median() / (fwd.median() + bwd.median());
  c.spread = std::max({c.spread, fwd.spread(), bwd.spread()});
}

}  // namespace

Calibration measure_compute(const ModelConfig& mc, const Context& ctx, Precision p) {
  // One layer and the rest of the model (embedding, final norm, LM head, loss) on T tokens;
  // the time outside attention is split between them by their matrix FLOPs (a subtraction
  // of two timed models would drown in the noise of a shared machine). The head is measured
  // on at most kCalibrationVocab rows and scaled to the whole vocabulary: its work is rows
  // times tokens.
  ModelConfig cal = mc;
  cal.num_hidden_layers = 1;
  cal.vocab_size = std::min(mc.vocab_size, kCalibrationVocab);
  int64_t T = 1024;  // products big enough to run at speed; fewer tokens for a large layer
  while (T > 128 && 6.0 * matmul_params(cal) * double(T) > kProbeFlops) T /= 2;
  const PassSeconds pass = time_passes(cal, T, ctx, p);
  const double C = double(mc.hidden_size), head_flops = double(cal.vocab_size) * C;
  const double layer_share = (matmul_params(cal) - head_flops) / matmul_params(cal);
  Calibration c;
  Rates& r = c.rates;
  r.threads = omp_get_max_threads();
  r.layer_token_s = pass.fwd_bwd * layer_share / double(T);
  r.head_token_s = pass.fwd_bwd * (1 - layer_share) / double(T) * double(mc.vocab_size) / double(cal.vocab_size);
  r.layer_fwd_share = pass.fwd / pass.fwd_bwd;
  c.spread = pass.spread;
  measure_attention(mc, ctx, p, c);
  return c;
}

void measure_adamw(Calibration& c) {
  // 23M parameters: 365 MB of weights, gradients and moments, far past the caches, as a
  // model's are (a 1B model's one-layer probe took seconds for the same rate).
  const ParamLayout layout = ParamLayout::llama(model_preset("30m"));
  Buffer<float> w(layout.total), g(layout.total);
  AdamW opt(layout, AdamWConfig{});
  int64_t step = 0;
  const Repeats adam = repeat([&] { opt.step(w.data(), g.data(), ++step, 1e-4, 1.0); });
  c.rates.adam_param_s = adam.median() / double(layout.total);
  c.spread = std::max(c.spread, adam.spread());
}

double measure_copy_gbs() {
  const size_t n = size_t(64) << 20;
  Buffer<char> a(n), b(n);
  const double s = median_seconds(3, [&] { std::memcpy(b.data(), a.data(), n); });
  return double(n) / s / 1e9;
}

std::string calibration_warning(const Calibration& one, const Calibration& many) {
  const double spread = std::max(one.spread, many.spread);
  const double per_core = one.rates.layer_token_s > 0
                              ? many.rates.layer_token_s * many.rates.threads / one.rates.layer_token_s
                              : 1;
  std::string why;
  if (spread > 1.0 / 3)
    why = cat("repeats of one probe differed by up to ", int(100 * spread + 0.5), "%");
  if (many.rates.threads > 1 && per_core > 1.5)
    why += cat(why.empty() ? "" : "; ", "on ", many.rates.threads, " threads each core ran the layers ",
               int(10 * per_core + 0.5) / 10.0, "x slower than one thread alone");
  if (why.empty()) return "";
  return cat("warning: the calibration disagrees with itself (", why, "): the host is busy or its cores ",
             "are shared (other jobs, SMT siblings), and the predicted times inherit it; run plan on a ",
             "quiet node of the kind the job will use");
}

}  // namespace lct
