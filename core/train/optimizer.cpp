#include "train/optimizer.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace lct {

double learning_rate(const AdamWConfig& c, int64_t step) {
  if (c.warmup_steps > 0 && step <= c.warmup_steps) return c.lr * double(step) / double(c.warmup_steps);
  const int64_t span = std::max<int64_t>(1, c.total_steps - c.warmup_steps);
  const double progress = std::min(1.0, double(step - c.warmup_steps) / double(span));
  return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(M_PI * progress));
}

double global_norm(const float* g, size_t n) { return std::sqrt(sum_squares(g, n)); }

namespace {
// One thread's share of sum_squares: kLanes running sums side by side (a single chain of
// dependent adds runs at one element per add latency), added in a fixed order at the end.
constexpr int kLanes = 16;
double sum_squares_serial(const float* __restrict g, int64_t n) {
  double lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int j = 0; j < kLanes; ++j) lane[j] += double(g[i + j]) * double(g[i + j]);
  }
  for (; i < n; ++i) lane[i % kLanes] += double(g[i]) * double(g[i]);
  double s = 0;
  for (double l : lane) s += l;
  return s;
}
}  // namespace

double sum_squares(const float* g, size_t n) {
  const int threads = omp_get_max_threads();
  std::vector<double> partial(size_t(threads), 0.0);
#pragma omp parallel num_threads(threads)
  {
    // The static split of omp for, by hand, so each thread's part is one contiguous range.
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const size_t lo = n * size_t(t) / size_t(nt), hi = n * size_t(t + 1) / size_t(nt);
    partial[size_t(t)] = sum_squares_serial(g + lo, int64_t(hi - lo));
  }
  double total = 0;
  for (double p : partial) total += p;  // fixed order: deterministic
  return total;
}

std::vector<size_t> shard_bounds(size_t total, int n) {
  std::vector<size_t> b(size_t(n) + 1, total);
  const size_t lines = (total + 63) / 64;
  for (int r = 0; r < n; ++r) b[size_t(r)] = std::min(total, lines * size_t(r) / size_t(n) * 64);
  return b;
}

AdamW::AdamW(const ParamLayout& layout, const AdamWConfig& config, Shard shard)
    : layout_(layout), config_(config), shard_(shard.end == 0 ? Shard{0, layout.total} : shard) {
  take_moments(shard_.size());
}

void AdamW::take_moments(size_t n) {
  if (config_.moments_tier.on()) {
    mt_ = std::make_unique<TierArray>(config_.moments_tier, n, "--offload-optimizer");
    vt_ = std::make_unique<TierArray>(config_.moments_tier, n, "--offload-optimizer");
  } else {
    m_ = Buffer<float>(n);
    v_ = Buffer<float>(n);
  }
}

namespace {
size_t total_size(const std::vector<Shard>& pieces) {
  size_t n = 0;
  for (const Shard& p : pieces) n += p.size();
  return n;
}
}  // namespace

AdamW::AdamW(const ParamLayout& layout, const AdamWConfig& config, std::vector<Shard> pieces)
    : layout_(layout), config_(config), pieces_(std::move(pieces)) {
  take_moments(total_size(pieces_));
}

namespace {
// One step's constants of the update (torch.optim.AdamW's arithmetic, in float).
struct AdamWRule {
  float b1, b2, eps, step_size, inv_sqrt_bc2, grad_mult;
};

// The update of n parameters over plain arrays. Restrict pointers and no errno from sqrt
// (its argument is never negative) let it vectorise; each element's operations and their
// order are those of the scalar loop, so the results are the same bits.
void adamw_update(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
                  int64_t n, const AdamWRule r, const float keep) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * r.grad_mult;
    m[i] = r.b1 * m[i] + (1.0f - r.b1) * gi;
    v[i] = r.b2 * v[i] + (1.0f - r.b2) * gi * gi;
    const float denom = __builtin_sqrtf(v[i]) * r.inv_sqrt_bc2 + r.eps;
    p[i] = p[i] * keep - r.step_size * m[i] / denom;
  }
}
}  // namespace

void AdamW::step(float* params, const float* grads, int64_t step, double lr, double grad_mult) {
  const double bc1 = 1.0 - std::pow(config_.beta1, double(step));
  const double bc2 = 1.0 - std::pow(config_.beta2, double(step));
  const AdamWRule rule{float(config_.beta1), float(config_.beta2), float(config_.eps), float(lr / bc1),
                       float(1.0 / std::sqrt(bc2)), float(grad_mult)};
  // Whole-layout arrays (one range, at its offsets) or the shard's pieces back to back.
  const bool packed = !pieces_.empty();
  const std::vector<Shard> ranges = packed ? pieces_ : std::vector<Shard>{shard_};
  size_t local = 0;  // where range r starts in the moments (and in packed arrays)
  for (const Shard& r : ranges) {
    for (const TensorSpec& t : layout_.tensors) {
      // The part of this tensor in the range: [lo, hi) of the flat array.
      const size_t lo = std::max(t.offset, r.begin), hi = std::min(t.offset + t.numel, r.end);
      if (lo >= hi) continue;
      const bool decay = t.kind == TensorKind::Linear || config_.decay_norms_and_embeddings;
      const float keep = decay ? float(1.0 - lr * config_.weight_decay) : 1.0f;
      const size_t at = local + (lo - r.begin);
      float* p = params + (packed ? at : lo);
      const float* g = grads + (packed ? at : lo);
      float* m = this->m() + at;
      float* v = this->v() + at;
      // On a tier the moments (and parameters) stream through in chunks: the next one read
      // ahead, the finished one written back. The elements and their arithmetic are the same.
      stream_chunks(hi - lo, {{mt_.get(), at}, {vt_.get(), at}, {pt_, lo}}, [&](size_t c0, size_t c1) {
        adamw_update(p + c0, g + c0, m + c0, v + c0, int64_t(c1 - c0), rule, keep);
      });
    }
    local += r.size();
  }
  if (mt_) {
    mt_->flush();
    vt_->flush();
  }
  if (pt_) pt_->flush();
}

}  // namespace lct
