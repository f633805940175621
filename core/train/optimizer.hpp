// AdamW over the flat parameter array, global-norm clipping and the learning-rate schedule.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/params.hpp"
#include "sys/memory.hpp"
#include "sys/tier_array.hpp"

namespace lct {

struct AdamWConfig {
  double lr = 3e-4;           // peak learning rate
  double min_lr = 3e-5;       // end of the cosine decay
  int64_t warmup_steps = 10;  // linear from lr/warmup to lr
  int64_t total_steps = 100;  // cosine decay ends here
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
  bool decay_norms_and_embeddings = false;  // by default only linear weights decay
  double grad_clip = 1.0;     // global L2 norm; <= 0 disables clipping
  TierSpec moments_tier = {}; // where the moments live (--offload-optimizer); none: in memory
};

// lr at `step` (1-based): linear warmup, then cosine from lr to min_lr at total_steps.
double learning_rate(const AdamWConfig& c, int64_t step);

// sum g^2 over the array, in double, summed in a fixed order (deterministic).
double sum_squares(const float* g, size_t n);
// sqrt(sum_squares(g, n)).
double global_norm(const float* g, size_t n);

// n ranges covering [0, total) in order, as even as whole 64-float lines allow: bounds[r]
// to bounds[r + 1] is rank r's (n + 1 entries).
std::vector<size_t> shard_bounds(size_t total, int n);

class AdamW {
 public:
  // Moments on a tier move through the update TierArray::kStreamChunk floats of each at a
  // time (stream_chunks); about kStreamWindowBytes of them are in memory meanwhile (two
  // arrays, three chunks each: the one updated, the one read ahead, the one being written back).
  static constexpr size_t kStreamWindowBytes = 2 * TierArray::kWindowBytes;
  // Moments for `shard` only (default: the whole array); step() reads and writes the
  // whole-layout arrays at the shard's offsets.
  AdamW(const ParamLayout& layout, const AdamWConfig& config, Shard shard = {});
  // ZeRO-3: moments for `pieces` (ranges of the layout, in order), and step() reads and
  // writes arrays that hold just those pieces back to back (the rank's shard).
  AdamW(const ParamLayout& layout, const AdamWConfig& config, std::vector<Shard> pieces);
  // One update at `step` (1-based) with learning rate `lr`, gradients multiplied by
  // `grad_mult` first (the clipping factor), of the shard's parameters only. Same
  // arithmetic as torch.optim.AdamW.
  void step(float* params, const float* grads, int64_t step, double lr, double grad_mult);
  // The parameters step() updates live on a tier (the fp32 master, --offload-master-weights):
  // they stream through with the moments. Whole-layout arrays only (not ZeRO-3's pieces).
  void stream_params(TierArray* params) { pt_ = params; }
  float* m() { return mt_ ? mt_->data() : m_.data(); }  // the shard's first and second moments
  float* v() { return vt_ ? vt_->data() : v_.data(); }
  const Shard& shard() const { return shard_; }
  const AdamWConfig& config() const { return config_; }

 private:
  const ParamLayout& layout_;
  AdamWConfig config_;
  Shard shard_;                // the one range (ZeRO-0/1/2); {0, 0} with pieces
  std::vector<Shard> pieces_;  // ZeRO-3: the ranges whose state is held back to back
  Buffer<float> m_, v_;                   // in memory, or
  std::unique_ptr<TierArray> mt_, vt_;    // on config.moments_tier, streamed through step()
  TierArray* pt_ = nullptr;               // the parameters' tier, if they have one
  void take_moments(size_t n);
};

}  // namespace lct
