#include "model/rope.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"

namespace lct {

namespace {

// theta^(-2i/D), i < D/2: plain RoPE.
std::vector<double> default_inv_freq(double theta, int64_t D) {
  std::vector<double> f(size_t(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) f[size_t(i)] = std::pow(theta, -2.0 * double(i) / double(D));
  return f;
}

// yarn's get_mscale: 0.1 * m * ln(s) + 1 when s > 1.
double yarn_mscale(double s, double m) { return s <= 1.0 ? 1.0 : 0.1 * m * std::log(s) + 1.0; }

// The dimension (of D) whose wavelength turns `rotations` times over `length` positions.
double yarn_correction_dim(double rotations, int64_t D, double theta, double length) {
  return double(D) * std::log(length / (rotations * 2.0 * M_PI)) / (2.0 * std::log(theta));
}

}  // namespace

RopeFrequencies rope_frequencies(const ModelConfig& c, int64_t seq_len) {
  const int64_t D = c.head_dim();
  const double theta = c.rope_theta;
  const RopeScaling& r = c.rope_scaling;
  RopeFrequencies out;
  out.inv_freq = default_inv_freq(theta, D);
  if (r.none()) return out;
  const double factor = r.factor;
  std::vector<double>& f = out.inv_freq;
  const size_t half = f.size();

  if (r.rope_type == "linear") {
    // Positions divided by factor, i.e. every frequency.
    for (double& x : f) x /= factor;
  } else if (r.rope_type == "dynamic") {
    // NTK-aware base: theta * (factor * L / max_pos - (factor - 1))^(D / (D - 2)), with
    // L = max(seq_len, max_position_embeddings) (no change up to max_position_embeddings).
    const double max_pos = double(c.max_position_embeddings);
    const double L = std::max(double(seq_len), max_pos);
    if (L > max_pos) {
      const double base =
          theta * std::pow(factor * L / max_pos - (factor - 1.0), double(D) / double(D - 2));
      f = default_inv_freq(base, D);
    }
  } else if (r.rope_type == "yarn") {
    const double original = double(r.original_max_position_embeddings > 0
                                       ? r.original_max_position_embeddings
                                       : c.max_position_embeddings);
    if (r.attention_factor > 0) out.attention_factor = r.attention_factor;
    else if (r.mscale > 0 && r.mscale_all_dim > 0)
      out.attention_factor = yarn_mscale(factor, r.mscale) / yarn_mscale(factor, r.mscale_all_dim);
    else out.attention_factor = yarn_mscale(factor, 1.0);
    double low = yarn_correction_dim(r.beta_fast, D, theta, original);
    double high = yarn_correction_dim(r.beta_slow, D, theta, original);
    if (r.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, double(D - 1));
    if (low == high) high += 0.001;  // Hugging Face's guard against a zero-width ramp
    for (size_t i = 0; i < half; ++i) {
      // ramp 0 (below low): extrapolation, the plain frequency; 1 (above high): interpolation,
      // the frequency / factor; linear in between.
      const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
      const double extrapolation = 1.0 - ramp;
      f[i] = (f[i] / factor) * (1.0 - extrapolation) + f[i] * extrapolation;
    }
  } else if (r.rope_type == "llama3") {
    const double original = double(r.original_max_position_embeddings);
    const double low_wavelen = original / r.low_freq_factor;
    const double high_wavelen = original / r.high_freq_factor;
    for (size_t i = 0; i < half; ++i) {
      const double wavelen = 2.0 * M_PI / f[i];
      if (wavelen < high_wavelen) continue;  // high frequencies: unchanged
      if (wavelen > low_wavelen) {           // low frequencies: divided by factor
        f[i] /= factor;
        continue;
      }
      const double smooth =
          (original / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      f[i] = (1.0 - smooth) * f[i] / factor + smooth * f[i];
    }
  } else {
    fail("rope_scaling.rope_type '", r.rope_type, "' is not one of linear, dynamic, yarn, llama3");
  }
  return out;
}

}  // namespace lct
