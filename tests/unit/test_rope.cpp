// RoPE's inverse frequencies with Hugging Face's rope_scaling (model/rope.hpp) against values
// computed independently (numpy float64 straight from transformers' modeling_rope_utils
// formulas; the script is in the comment below) and against identities; the RoPE table's
// attention factor; and the validation messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.hpp"
#include "kernels/layers.hpp"
#include "model/rope.hpp"
#include "test_rope_scaling.hpp"

namespace lct {
namespace {

// head_dim 16, rope_theta 500 (the golden tests' model).
ModelConfig base_config(int64_t max_pos = 4096) {
  ModelConfig c = model_preset("tiny");
  c.rope_theta = 500.0;
  c.max_position_embeddings = max_pos;
  return c;
}

void expect_near_rel(const std::vector<double>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-13 * std::abs(want[i])) << what << " i=" << i;
}

// The values below are from (numpy float64, D = 16, theta = 500):
//   base = [theta ** (-(2*i)/D) for i in range(8)]
//   dynamic (max_pos 16, seq_len 48, factor 4): b = theta * (4*48/16 - 3) ** (D/(D-2)),
//     [1 / b ** (2*i/D)]
//   yarn: corr(rot, orig) = D*log(orig/(rot*2*pi)) / (2*log(theta)); lo, hi = max(floor(corr(32,
//     orig)), 0), min(ceil(corr(1, orig)), D-1) (truncate) or unrounded; ramp = clip((i-lo)/(hi-lo),
//     0, 1); base*(1-ramp) + base/factor*ramp
//   llama3: wl = 2*pi/f; f if wl < orig/high; f/factor if wl > orig/low; else s = (orig/wl -
//     low)/(high - low), (1-s)*f/factor + s*f
TEST(RopeScaling, DynamicMatchesHuggingFacesFormula) {
  ModelConfig c = base_config(16);
  c.rope_scaling = rope_scaling("dynamic", 4);
  const RopeFrequencies f = rope_frequencies(c, 48);
  expect_near_rel(f.inv_freq,
                  {1, 0.33597610499419078, 0.11287994312706753, 0.037924963623797929,
                   0.012741881560369999, 0.0042809677369504149, 0.0014383028658663958,
                   0.00048323539467577377},
                  "dynamic");
  EXPECT_EQ(f.attention_factor, 1.0);
  // Up to max_position_embeddings nothing changes (Hugging Face clamps the length to it).
  const RopeFrequencies same = rope_frequencies(c, 16), plain = rope_frequencies(base_config(16), 48);
  EXPECT_EQ(same.inv_freq, plain.inv_freq);
}

TEST(RopeScaling, YarnMatchesHuggingFacesFormula) {
  ModelConfig c = base_config(48);
  c.rope_scaling = rope_scaling("yarn", 3, 16);  // correction range [0, 2]
  RopeFrequencies f = rope_frequencies(c, 48);
  expect_near_rel(f.inv_freq,
                  {1, 0.30657553188451353, 0.070491417562704273, 0.032416415748869103,
                   0.014907119849998597, 0.0068552372953192648, 0.0031524720300105859,
                   0.0014497061840273212},
                  "yarn");
  EXPECT_NEAR(f.attention_factor, 1.109861228866811, 1e-15);  // 0.1 ln 3 + 1

  c.rope_scaling = rope_scaling("yarn", 4, 48);
  c.rope_scaling.beta_fast = 16;
  c.rope_scaling.beta_slow = 2;
  c.rope_scaling.truncate = false;  // range [0, 1.7252]
  c.rope_scaling.mscale = 2;
  c.rope_scaling.mscale_all_dim = 1;
  f = rope_frequencies(c, 48);
  expect_near_rel(f.inv_freq,
                  {1, 0.25994539438246422, 0.052868563172028205, 0.024312311811651825,
                   0.011180339887498949, 0.0051414279714894484, 0.0023643540225079395,
                   0.0010872796380204908},
                  "yarn mscale");
  EXPECT_NEAR(f.attention_factor, 1.121751143713058, 1e-15);  // (0.2 ln 4 + 1) / (0.1 ln 4 + 1)
  c.rope_scaling.attention_factor = 0.75;  // given: used as is
  EXPECT_EQ(rope_frequencies(c, 48).attention_factor, 0.75);
  // original_max_position_embeddings 0 = max_position_embeddings.
  ModelConfig a = base_config(16), b = base_config(16);
  a.rope_scaling = rope_scaling("yarn", 3, 0);
  b.rope_scaling = rope_scaling("yarn", 3, 16);
  EXPECT_EQ(rope_frequencies(a, 48).inv_freq, rope_frequencies(b, 48).inv_freq);
}

TEST(RopeScaling, Llama3MatchesHuggingFacesFormula) {
  ModelConfig c = base_config(128);
  c.rope_scaling = llama3_scaling(4, 32, 1, 4);
  const RopeFrequencies f = rope_frequencies(c, 48);
  // Wavelengths 6.3 (kept), 13.7 and 29.7 (smoothed), 64.6 and longer (divided by 4).
  expect_near_rel(f.inv_freq,
                  {1, 0.26925738121582155, 0.05694100347337417, 0.024312311811651825,
                   0.011180339887498949, 0.0051414279714894484, 0.0023643540225079395,
                   0.0010872796380204908},
                  "llama3");
  EXPECT_EQ(f.attention_factor, 1.0);
}

TEST(RopeScaling, Identities) {
  const ModelConfig plain_config = base_config();
  const std::vector<double> plain = rope_frequencies(plain_config, 4096).inv_freq;
  for (size_t i = 0; i < plain.size(); ++i)  // theta^(-2i/D)
    EXPECT_NEAR(plain[i], std::pow(500.0, -double(2 * i) / 16.0), 1e-16);
  // linear: positions / factor, i.e. every frequency / factor.
  ModelConfig c = base_config();
  c.rope_scaling = rope_scaling("linear", 8);
  std::vector<double> f = rope_frequencies(c, 4096).inv_freq;
  for (size_t i = 0; i < f.size(); ++i) EXPECT_DOUBLE_EQ(f[i], plain[i] / 8);
  // ... i.e. positions / factor: position 16 with factor 8 rotates as position 2 does plainly.
  const RopeTable lin_table(17, f), plain_table(17, plain);
  std::vector<float> x(16), a, b;
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(std::cos(3.0 * double(i)));
  a = x;
  b = x;
  const int32_t p16 = 16, p2 = 2;
  lin_table.forward(a.data(), &p16, 1, 1);
  plain_table.forward(b.data(), &p2, 1, 1);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6f) << i;
  // factor 1 changes nothing for linear, llama3 and yarn; "default" is none; dynamic changes
  // nothing up to max_position_embeddings (but does past it, even with factor 1).
  for (const char* t : {"linear", "default"}) {
    c.rope_scaling = rope_scaling(t, 1);
    EXPECT_EQ(rope_frequencies(c, 8192).inv_freq, plain) << t;
  }
  c.rope_scaling = rope_scaling("dynamic", 8);
  EXPECT_EQ(rope_frequencies(c, 4096).inv_freq, plain);
  EXPECT_LT(rope_frequencies(c, 4097).inv_freq[1], plain[1]);
  c.rope_scaling = rope_scaling("llama3", 1, 1024);
  c.rope_scaling.low_freq_factor = 1;
  c.rope_scaling.high_freq_factor = 4;
  f = rope_frequencies(c, 8192).inv_freq;
  for (size_t i = 0; i < f.size(); ++i) EXPECT_DOUBLE_EQ(f[i], plain[i]);
  c.rope_scaling = rope_scaling("yarn", 1, 1024);
  const RopeFrequencies y = rope_frequencies(c, 8192);
  for (size_t i = 0; i < f.size(); ++i) EXPECT_DOUBLE_EQ(y.inv_freq[i], plain[i]);
  EXPECT_EQ(y.attention_factor, 1.0);
  // llama3 with a huge original context: every wavelength is "high frequency", kept.
  c.rope_scaling = rope_scaling("llama3", 8, 1 << 30);
  c.rope_scaling.low_freq_factor = 1;
  c.rope_scaling.high_freq_factor = 4;
  EXPECT_EQ(rope_frequencies(c, 8192).inv_freq, plain);
}

TEST(RopeScaling, TableScalesCosAndSinByTheAttentionFactor) {
  // Rotating by a table with factor m gives m x the plain rotation; backward is its transpose.
  const std::vector<double> inv = rope_frequencies(base_config(), 64).inv_freq;
  const RopeTable plain(64, inv), scaled(64, inv, 1.25);
  std::vector<float> x(2 * 16), y;
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(double(i) + 0.5));
  const std::vector<int32_t> pos = {5, 37};
  std::vector<float> a = x, b = x;
  plain.forward(a.data(), pos.data(), 2, 1);
  scaled.forward(b.data(), pos.data(), 2, 1);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(b[i], 1.25f * a[i], 1e-6f);
  // <R x, y> == <x, R^T y> with R = the scaled rotation.
  y = x;
  std::reverse(y.begin(), y.end());
  std::vector<float> rty = y;
  scaled.backward(rty.data(), pos.data(), 2, 1);
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    lhs += double(b[i]) * y[i];
    rhs += double(x[i]) * rty[i];
  }
  EXPECT_NEAR(lhs, rhs, 1e-5);
}

TEST(RopeScaling, ValidationNamesTheAttributeAndTheFix) {
  auto message = [](const RopeScaling& r) -> std::string {
    ModelConfig c = base_config();
    c.rope_scaling = r;
    try {
      c.validate("model file 'm.h5'");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(message(rope_scaling("", 1)), "");
  EXPECT_EQ(message(rope_scaling("linear", 2)), "");
  EXPECT_NE(message(rope_scaling("ntk", 2)).find("rope_scaling.rope_type is 'ntk'"), std::string::npos);
  const std::string low = message(rope_scaling("linear", 0.5));
  EXPECT_NE(low.find("rope_scaling.factor is 0.5 but must be >= 1"), std::string::npos) << low;
  EXPECT_NE(low.find("--rope-factor"), std::string::npos) << low;
  RopeScaling l3 = rope_scaling("llama3", 8);
  EXPECT_NE(message(l3).find("original_max_position_embeddings is not given but llama3 needs it"),
            std::string::npos);
  l3.original_max_position_embeddings = 8192;
  EXPECT_NE(message(l3).find("--rope-low-freq-factor 1 --rope-high-freq-factor 4"), std::string::npos);
  l3.low_freq_factor = 4;
  l3.high_freq_factor = 1;
  const std::string order = message(l3);
  EXPECT_NE(order.find("rope_scaling.low_freq_factor 4 must be smaller than rope_scaling.high_freq_factor 1"),
            std::string::npos) << order;
  l3.low_freq_factor = 1;
  l3.high_freq_factor = 4;
  EXPECT_EQ(message(l3), "");
  RopeScaling y = rope_scaling("yarn", 4);
  y.beta_fast = 1;
  y.beta_slow = 32;
  EXPECT_NE(message(y).find("yarn needs beta_fast >= beta_slow"), std::string::npos);
  // What init refuses: a parameter the type does not read.
  RopeScaling u = rope_scaling("linear", 2, 4096);
  EXPECT_EQ(rope_scaling_unused(u), std::vector<std::string>{"rope_scaling.original_max_position_embeddings"});
  EXPECT_EQ(rope_scaling_unused(rope_scaling("", 2)), std::vector<std::string>{"rope_scaling.factor"});
  EXPECT_TRUE(rope_scaling_unused(l3).empty());
}

}  // namespace
}  // namespace lct
