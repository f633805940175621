// The flash attention kernel against the reference definition.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include "kernels/attention.hpp"
#include "kernels/attention_onednn.hpp"
#include "test_isa.hpp"

namespace lct {
namespace {

struct Case {
  int64_t S, H, KV, D;
  bool documents;  // packed documents with padding, or one causal sequence
  AttnBlocks blocks;
  Isa isa = test_isa();
  int64_t window = 0;  // sliding window (0 = full causal)
  AttnDims dims() const { return {S, S, H, KV, D, window}; }
};

FlashAttention make_flash(const Case& c) {
  return FlashAttention({c.S, c.S, c.H, c.KV, c.D}, c.blocks, c.isa);
}

struct Inputs {
  std::vector<float> q, k, v, dout;
  std::vector<int32_t> idx, doc;
};

// Documents of odd lengths 1..S/3 back to back, then a tail of padding.
Inputs make_inputs(const Case& c, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  Inputs in;
  auto fill = [&](std::vector<float>& x, int64_t size) {
    x.resize(size_t(size));
    for (auto& e : x) e = n(gen);
  };
  fill(in.q, c.S * c.H * c.D);
  fill(in.k, c.S * c.KV * c.D);
  fill(in.v, c.S * c.KV * c.D);
  fill(in.dout, c.S * c.H * c.D);
  in.idx.resize(size_t(c.S));
  in.doc.assign(size_t(c.S), 0);
  for (int64_t i = 0; i < c.S; ++i) in.idx[size_t(i)] = int32_t(i);
  if (c.documents) {
    const int64_t pad = c.S / 10;
    int32_t d = 0;
    int64_t i = 0;
    while (i < c.S - pad) {
      const int64_t len = std::min<int64_t>(c.S - pad - i, 1 + 2 * int64_t(gen() % (c.S / 6 + 1)));
      for (int64_t t = 0; t < len; ++t) in.doc[size_t(i + t)] = d;
      i += len;
      ++d;
    }
    for (; i < c.S; ++i) in.doc[size_t(i)] = -1;
  }
  return in;
}

double max_rel(const std::vector<float>& a, const std::vector<float>& ref, double* abs_out) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(ref[i]) && a[i] == ref[i]) continue;
    diff = std::max(diff, double(std::abs(a[i] - ref[i])));
    scale = std::max(scale, double(std::abs(ref[i])));
  }
  *abs_out = diff;
  return scale > 0 ? diff / scale : diff;
}

// The five outputs of a forward and backward pass, in a fixed order.
struct Outputs {
  std::vector<float> o, lse, dq, dk, dv;
  const std::vector<float>* all(int t) const {
    const std::vector<float>* v[] = {&o, &lse, &dq, &dk, &dv};
    return v[t];
  }
};

// Every output within `bound` of the reference (max abs diff / max abs); prints each figure.
void expect_close(const Case& c, const Outputs& got, const Outputs& want, double bound,
                  const char* what) {
  const char* names[] = {"O", "LSE", "dQ", "dK", "dV"};
  for (int t = 0; t < 5; ++t) {
    double abs_diff;
    const double rel = max_rel(*got.all(t), *want.all(t), &abs_diff);
    std::printf("%s %s S=%lld H=%lld KV=%lld W=%lld %s %-3s max abs %.2e rel %.2e\n", isa_name(c.isa),
                what, (long long)c.S, (long long)c.H, (long long)c.KV, (long long)c.window,
                c.documents ? "docs  " : "causal", names[t], abs_diff, rel);
    EXPECT_LT(rel, bound) << names[t] << " " << what;
    for (float x : *got.all(t)) ASSERT_FALSE(std::isnan(x)) << names[t] << " " << what;
  }
}

// Zeroed outputs of the case's sizes.
Outputs zero_outputs(const Case& c) {
  const size_t nq = size_t(c.S * c.H * c.D), nk = size_t(c.S * c.KV * c.D), nl = size_t(c.H * c.S);
  return {std::vector<float>(nq), std::vector<float>(nl), std::vector<float>(nq, 0.f),
          std::vector<float>(nk, 0.f), std::vector<float>(nk, 0.f)};
}

// The reference's forward and backward on in's values.
Outputs reference_outputs(const Case& c, const Inputs& in) {
  Outputs want = zero_outputs(c);
  const TokenTags tags{in.idx.data(), in.doc.data()};
  attention_reference_forward(c.dims(), in.q.data(), in.k.data(), in.v.data(), tags, tags, want.o.data(),
                              want.lse.data());
  attention_reference_backward(c.dims(), in.q.data(), in.k.data(), in.v.data(), in.dout.data(), tags,
                               tags, want.dq.data(), want.dk.data(), want.dv.data());
  return want;
}

// in's q, k, v and dout rounded to bf16, in place; the bf16 values returned in that order.
std::array<std::vector<bf16>, 4> round_to_bf16(Inputs& in) {
  std::array<std::vector<bf16>, 4> out;
  std::vector<float>* xs[] = {&in.q, &in.k, &in.v, &in.dout};
  for (size_t i = 0; i < 4; ++i) {
    const int64_t n = int64_t(xs[i]->size());
    out[i].resize(size_t(n));
    convert(xs[i]->data(), out[i].data(), n);
    convert(out[i].data(), xs[i]->data(), n);
  }
  return out;
}

// flash's forward and backward on q, k, v and dout of type X (in's values, or
// round_to_bf16's of them); in gives the tags and dout's fp32 values.
template <class X>
Outputs flash_outputs(FlashAttention& flash, const Case& c, const Inputs& in, const X* q, const X* k,
                      const X* v, const X* dout) {
  Outputs got = zero_outputs(c);
  const TokenTags tags{in.idx.data(), in.doc.data()};
  std::vector<float> delta(size_t(c.H * c.S));
  flash.forward(c.dims(), q, k, v, tags, tags, got.o.data(), got.lse.data());
  attention_delta(got.o.data(), in.dout.data(), c.S, c.H, c.D, delta.data());
  flash.backward(c.dims(), q, k, v, got.lse.data(), delta.data(), dout, tags, tags, got.dq.data(),
                 got.dk.data(), got.dv.data());
  return got;
}
Outputs flash_outputs(FlashAttention& flash, const Case& c, const Inputs& in,
                      const std::array<std::vector<bf16>, 4>& x16) {
  return flash_outputs(flash, c, in, x16[0].data(), x16[1].data(), x16[2].data(), x16[3].data());
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << "S=" << c.S << " H=" << c.H << " KV=" << c.KV << " D=" << c.D << (c.documents ? " docs" : " causal")
      << " W=" << c.window << " " << isa_name(c.isa);
}

class FlashVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(FlashVsReference, ForwardAndBackwardMatch) {
  const Case c = GetParam();
  const Inputs in = make_inputs(c, 17);
  FlashAttention flash = make_flash(c);
  const Outputs got = flash_outputs(flash, c, in, in.q.data(), in.k.data(), in.v.data(), in.dout.data());
  expect_close(c, got, reference_outputs(c, in), 1e-5, "fp32");
  // Padding rows see nothing: zero output, -inf lse, zero gradient.
  for (int64_t i = 0; i < c.S; ++i) {
    if (in.doc[size_t(i)] >= 0) continue;
    for (int64_t h = 0; h < c.H; ++h) {
      EXPECT_EQ(got.lse[size_t(h * c.S + i)], -std::numeric_limits<float>::infinity());
      for (int64_t x = 0; x < c.D; ++x) {
        EXPECT_EQ(got.o[size_t((i * c.H + h) * c.D + x)], 0.0f);
        EXPECT_EQ(got.dq[size_t((i * c.H + h) * c.D + x)], 0.0f);
      }
    }
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  const std::vector<Isa> isas = test_isas();
  for (Isa isa : isas) {
    for (int64_t S : {1, 7, 64, 1000, 4096})
      for (bool docs : {false, true})
        for (int64_t kv : {4, 1}) {  // GQA ratio 1 and 4
          if ((docs && S < 7) || (S == 4096 && isa != isas.front())) continue;
          const int64_t D = S >= 4096 ? 32 : 16;
          const AttnBlocks b = S >= 1000 ? AttnBlocks{128, 128} : AttnBlocks{16, 24};
          out.push_back({S, 4, kv, D, docs, b, isa});
        }
    out.push_back({333, 2, 1, 64, true, {64, 48}, isa});   // D 64, blocks that divide nothing
    out.push_back({130, 4, 2, 128, true, {33, 70}, isa});  // D 128, odd blocks
    out.push_back({97, 3, 3, 24, false, {13, 9}, isa});    // D not a multiple of 16 (or 8)
    // Sliding windows: narrower than a block, a few blocks wide and not a multiple of
    // them, one token (each query sees itself only); over documents and padding too.
    out.push_back({1000, 4, 1, 16, true, {128, 128}, isa, 100});
    out.push_back({1000, 4, 4, 16, false, {128, 128}, isa, 1});
    out.push_back({333, 2, 1, 64, false, {64, 48}, isa, 50});
    out.push_back({333, 2, 2, 32, true, {16, 24}, isa, 7});
    out.push_back({130, 4, 2, 128, true, {33, 70}, isa, 40});
    out.push_back({97, 3, 3, 24, false, {13, 9}, isa, 20});
  }
  out.push_back({4096, 4, 1, 32, false, {128, 128}, isas.front(), 300});
  return out;
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FlashVsReference);
INSTANTIATE_TEST_SUITE_P(Sizes, FlashVsReference, ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                           const Case& c = info.param;
                           std::string name = "S";
                           name += std::to_string(c.S);
                           name += c.documents ? "_docs_gqa" : "_causal_gqa";
                           name += std::to_string(c.H / c.KV) + "_D" + std::to_string(c.D) + "_";
                           if (c.window) name += std::string("W") + std::to_string(c.window) + "_";
                           return name + isa_name(c.isa);
                         });

// bf16 inputs: products in bf16 (vdpbf16ps tiles, where the CPU has them) and in fp32
// (inputs widened while packed), against the definition on the same bf16-rounded values.
class FlashBf16VsReference : public ::testing::TestWithParam<Case> {};

TEST_P(FlashBf16VsReference, ForwardAndBackwardMatch) {
  const Case c = GetParam();
  Inputs in = make_inputs(c, 23);
  const std::array<std::vector<bf16>, 4> x16 = round_to_bf16(in);
  const Outputs want = reference_outputs(c, in);
  for (Precision products : {Precision::Bf16, Precision::Fp32}) {
    FlashAttention flash({c.S, c.S, c.H, c.KV, c.D}, c.blocks, c.isa, products);
    const Outputs got = flash_outputs(flash, c, in, x16);
    // bf16 products round p and dS to 8 bits of mantissa: a few parts in 1e3 of the largest
    // value; fp32 products of bf16 inputs are the fp32 kernel itself.
    const bool b16 = flash.products() == Precision::Bf16;
    expect_close(c, got, want, b16 ? 1e-2 : 1e-5, b16 ? "bf16 products" : "fp32 products");
  }
}

std::vector<Case> bf16_cases() {
  std::vector<Case> out;
  for (Isa isa : test_isas()) {
    out.push_back({1000, 4, 1, 64, true, {128, 128}, isa});
    out.push_back({333, 2, 2, 32, false, {64, 48}, isa});
    out.push_back({130, 4, 2, 128, true, {33, 70}, isa});
    out.push_back({1000, 4, 2, 64, true, {128, 128}, isa, 150});
    out.push_back({333, 2, 1, 32, false, {64, 48}, isa, 33});
  }
  return out;
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FlashBf16VsReference);
INSTANTIATE_TEST_SUITE_P(Sizes, FlashBf16VsReference, ::testing::ValuesIn(bf16_cases()),
                         [](const auto& info) {
                           const Case& c = info.param;
                           std::string name = "S";
                           name += std::to_string(c.S) + "_D" + std::to_string(c.D) + "_";
                           if (c.window) name += std::string("W") + std::to_string(c.window) + "_";
                           return name + isa_name(c.isa);
                         });

// Scores that rise along the keys, by 4 nats a key block over the first two and by 12 over
// the rest: every key block raises the rows' running maxima, and the online softmax rescales
// what they summed by factors far from 1. fp32 and bf16 products on every path, forward and
// backward, against the reference. bf16 products: dQ's first dimension sums dS (rounded to
// 2^-9) times keys of up to 40 whose sum cancels to far less, hence 3e-2 (1e-3 to 3e-3 for
// every other output; O was 7e-3 and the LSE 6e-4 while bf16 keys carried the whole scale).
Inputs rising_inputs(const Case& c) {
  Inputs in = make_inputs(c, 29);
  for (int64_t i = 0; i < c.S; ++i) {  // q . k / sqrt(D) gains 4 or 12 every 128 keys
    const float ramp = i < 256 ? float(i) / 16 : 16 + 3 * float(i - 256) / 16;
    for (int64_t h = 0; h < c.H; ++h) in.q[size_t((i * c.H + h) * c.D)] = std::sqrt(float(c.D)) / 4;
    for (int64_t h = 0; h < c.KV; ++h) in.k[size_t((i * c.KV + h) * c.D)] = ramp;
  }
  return in;
}

TEST(FlashAttention, ScoresRisingAcrossKeyBlocksMatchTheReference) {
  for (Isa isa : test_isas())
    for (bool docs : {false, true}) {
      const Case c{400, 4, 2, 64, docs, {128, 128}, isa};
      Inputs in = rising_inputs(c);
      // bf16 inputs for both: fp32 products of them run the fp32 tiles
      const std::array<std::vector<bf16>, 4> x16 = round_to_bf16(in);
      const Outputs want = reference_outputs(c, in);
      for (Precision products : {Precision::Fp32, Precision::Bf16}) {
        FlashAttention flash({c.S, c.S, c.H, c.KV, c.D}, c.blocks, isa, products);
        const Outputs got = flash_outputs(flash, c, in, x16);
        const bool b16 = flash.products() == Precision::Bf16;  // (fp32 where the path has none)
        expect_close(c, got, want, b16 ? 3e-2 : 1e-5, b16 ? "rising, bf16 products" : "rising, fp32");
      }
    }
}

TEST(FlashAttention, PerturbingOneDocumentChangesNoOtherDocument) {
  const Case c{600, 4, 2, 16, true, {32, 32}};
  Inputs in = make_inputs(c, 5);
  const AttnDims d = c.dims();
  FlashAttention flash = make_flash(c);
  auto run = [&](const Inputs& x, std::vector<float>& o, std::vector<float>& dq, std::vector<float>& dk) {
    const TokenTags t{x.idx.data(), x.doc.data()};
    std::vector<float> lse(size_t(c.H * c.S)), delta(size_t(c.H * c.S)), dv(dk.size(), 0.f);
    flash.forward(d, x.q.data(), x.k.data(), x.v.data(), t, t, o.data(), lse.data());
    attention_delta(o.data(), x.dout.data(), c.S, c.H, c.D, delta.data());
    flash.backward(d, x.q.data(), x.k.data(), x.v.data(), lse.data(), delta.data(), x.dout.data(),
                   t, t, dq.data(), dk.data(), dv.data());
  };
  const size_t nq = size_t(c.S * c.H * c.D), nk = size_t(c.S * c.KV * c.D);
  std::vector<float> o1(nq), dq1(nq, 0.f), dk1(nk, 0.f), o2(nq), dq2(nq, 0.f), dk2(nk, 0.f);
  run(in, o1, dq1, dk1);
  // Perturb the key, value and query of one token of document 1.
  int64_t victim = 0;
  while (in.doc[size_t(victim)] != 1) ++victim;
  for (int64_t x = 0; x < c.KV * c.D; ++x) {
    in.k[size_t(victim * c.KV * c.D + x)] += 1.0f;
    in.v[size_t(victim * c.KV * c.D + x)] -= 1.0f;
  }
  for (int64_t x = 0; x < c.H * c.D; ++x) in.q[size_t(victim * c.H * c.D + x)] *= 2.0f;
  run(in, o2, dq2, dk2);
  int changed_inside = 0;
  for (int64_t i = 0; i < c.S; ++i) {
    const bool inside = in.doc[size_t(i)] == 1;
    for (int64_t x = 0; x < c.H * c.D; ++x) {
      const size_t e = size_t(i * c.H * c.D + x);
      if (inside) {
        changed_inside += o1[e] != o2[e];
      } else {
        ASSERT_EQ(o1[e], o2[e]) << "token " << i << " of doc " << in.doc[size_t(i)];
        ASSERT_EQ(dq1[e], dq2[e]);
      }
    }
    if (!inside) {
      for (int64_t x = 0; x < c.KV * c.D; ++x)
        ASSERT_EQ(dk1[size_t(i * c.KV * c.D + x)], dk2[size_t(i * c.KV * c.D + x)]);
    }
  }
  EXPECT_GT(changed_inside, 0);  // the perturbation did reach its own document
}

// A window as long as the sequence changes nothing, bit for bit; a shorter one changes rows
// past it and no row before it.
TEST(FlashAttention, WindowAsLongAsTheSequenceIsFullCausal) {
  Case c{700, 4, 2, 32, false, {64, 64}};
  const Inputs in = make_inputs(c, 3);
  const TokenTags t{in.idx.data(), in.doc.data()};
  FlashAttention flash = make_flash(c);
  auto forward = [&](int64_t window) {
    c.window = window;
    std::vector<float> o(size_t(c.S * c.H * c.D)), lse(size_t(c.H * c.S));
    flash.forward(c.dims(), in.q.data(), in.k.data(), in.v.data(), t, t, o.data(), lse.data());
    return o;
  };
  const std::vector<float> full = forward(0), same = forward(c.S), windowed = forward(200);
  EXPECT_EQ(full, same);
  const size_t row = size_t(c.H * c.D);
  EXPECT_TRUE(std::equal(full.begin(), full.begin() + 200 * row, windowed.begin()));
  for (int64_t i = 200; i < c.S; ++i)
    EXPECT_FALSE(std::equal(full.begin() + i * row, full.begin() + (i + 1) * row, windowed.begin() + i * row))
        << "row " << i << " sees keys outside its window";
}

// Sums in a fixed order: the same bits on 1 and on every thread (whose backward tasks take
// shorter runs of key blocks), call after call.
// The model's memory plan counts the kernel's workspace before it exists
// (workspace_bytes_for): a buffer added to the kernel but not to the plan fails here.
TEST(FlashAttention, WorkspaceIsWithinThePlannedBound) {
  const int threads = omp_get_max_threads();
  for (Isa isa : test_isas())
    for (Precision products : {Precision::Fp32, Precision::Bf16})
      for (const Case& c : {Case{1000, 4, 1, 32, true, {64, 64}}, Case{333, 6, 2, 16, false, {40, 72}},
                            Case{4096, 8, 8, 64, false, {64, 64}}, Case{129, 2, 2, 128, false, {128, 32}}}) {
        const AttnLimits lim{c.S, c.S, c.H, c.KV, c.D};
        const FlashAttention flash(lim, c.blocks, isa, products);
        EXPECT_LE(flash.workspace_bytes(), FlashAttention::workspace_bytes_for(lim, c.blocks, threads))
            << "S " << c.S << " H " << c.H << " D " << c.D << " isa " << int(isa) << " products "
            << (products == Precision::Bf16 ? "bf16" : "fp32");
      }
}

TEST(FlashAttention, BackwardIsBitwiseRepeatableOnAnyThreadCount) {
  const Case c{1000, 4, 1, 32, true, {64, 64}};
  const Inputs in = make_inputs(c, 9);
  const AttnDims d = c.dims();
  const TokenTags t{in.idx.data(), in.doc.data()};
  FlashAttention flash = make_flash(c);
  std::vector<float> o(size_t(c.S * c.H * c.D)), lse(size_t(c.H * c.S)), delta(lse.size());
  flash.forward(d, in.q.data(), in.k.data(), in.v.data(), t, t, o.data(), lse.data());
  attention_delta(o.data(), in.dout.data(), c.S, c.H, c.D, delta.data());
  std::vector<float> first;
  const int threads = omp_get_max_threads();
  for (int rep : {threads, 1, threads}) {
    omp_set_num_threads(rep);
    std::vector<float> dq(o.size(), 0.f), dk(size_t(c.S * c.KV * c.D), 0.f), dv(dk.size(), 0.f);
    flash.backward(d, in.q.data(), in.k.data(), in.v.data(), lse.data(), delta.data(),
                   in.dout.data(), t, t, dq.data(), dk.data(), dv.data());
    dq.insert(dq.end(), dk.begin(), dk.end());
    dq.insert(dq.end(), dv.begin(), dv.end());
    if (first.empty()) first = dq;
    else EXPECT_EQ(dq, first) << rep << " threads";
  }
  omp_set_num_threads(threads);
}

// The oneDNN tile path (attention_onednn.hpp) against the definition on the fused kernel's
// shapes: fp32 products to 1e-5; bf16 products of bf16 inputs, against the definition on the
// same bf16-rounded values, to 1e-2 (p and dS rounded to bf16, as the fused bf16 tiles do).
class OneDnnVsReference : public ::testing::TestWithParam<Case> {};

Outputs run_onednn(const Case& c, const Inputs& in, Precision products, TileEngine engine = TileEngine::Auto) {
  const AttnDims d = c.dims();
  const TokenTags tags{in.idx.data(), in.doc.data()};
  const size_t nq = size_t(c.S * c.H * c.D), nk = size_t(c.S * c.KV * c.D), nl = size_t(c.H * c.S);
  Outputs got{std::vector<float>(nq), std::vector<float>(nl), std::vector<float>(nq, 0.f),
              std::vector<float>(nk, 0.f), std::vector<float>(nk, 0.f)};
  OneDnnAttention a({c.S, c.S, c.H, c.KV, c.D}, c.blocks, c.isa, products, engine);
  if (products == Precision::Fp32) {
    EXPECT_EQ(a.products(), Precision::Fp32);
  }
  if (engine == TileEngine::Emulated) {
    EXPECT_TRUE(a.matrix_engine());
  }
  std::vector<float> delta(nl);
  const auto run = [&](const auto& q, const auto& k, const auto& v, const auto& dout) {
    a.forward(d, q.data(), k.data(), v.data(), tags, tags, got.o.data(), got.lse.data());
    attention_delta(got.o.data(), in.dout.data(), c.S, c.H, c.D, delta.data());
    a.backward(d, q.data(), k.data(), v.data(), got.lse.data(), delta.data(), dout.data(), tags, tags,
               got.dq.data(), got.dk.data(), got.dv.data());
  };
  if (products == Precision::Fp32) {
    run(in.q, in.k, in.v, in.dout);
  } else {
    const auto b16 = [](const std::vector<float>& x) {
      std::vector<bf16> out(x.size());
      for (size_t i = 0; i < x.size(); ++i) out[i] = to_bf16(x[i]);
      return out;
    };
    run(b16(in.q), b16(in.k), b16(in.v), b16(in.dout));
  }
  return got;
}

Outputs run_reference(const Case& c, const Inputs& in) {
  const AttnDims d = c.dims();
  const TokenTags tags{in.idx.data(), in.doc.data()};
  const size_t nq = size_t(c.S * c.H * c.D), nk = size_t(c.S * c.KV * c.D), nl = size_t(c.H * c.S);
  Outputs want{std::vector<float>(nq), std::vector<float>(nl), std::vector<float>(nq, 0.f),
               std::vector<float>(nk, 0.f), std::vector<float>(nk, 0.f)};
  attention_reference_forward(d, in.q.data(), in.k.data(), in.v.data(), tags, tags, want.o.data(), want.lse.data());
  attention_reference_backward(d, in.q.data(), in.k.data(), in.v.data(), in.dout.data(), tags, tags,
                               want.dq.data(), want.dk.data(), want.dv.data());
  return want;
}

TEST_P(OneDnnVsReference, ForwardAndBackwardMatch) {
  const Case c = GetParam();
  Inputs in = make_inputs(c, 29);
  expect_close(c, run_onednn(c, in, Precision::Fp32), run_reference(c, in), 1e-5, "onednn fp32");
  for (std::vector<float>* x : {&in.q, &in.k, &in.v, &in.dout})
    for (float& e : *x) e = to_f32(to_bf16(e));
  // bf16 products round p and dS to 8 bits of mantissa; where oneDNN has no bf16 matmul the
  // bf16 inputs are multiplied in fp32, and the fp32 bound holds.
  const bool b16 = OneDnnAttention({1, 1, 1, 1, c.D}, c.blocks, c.isa, Precision::Bf16).products() == Precision::Bf16;
  expect_close(c, run_onednn(c, in, Precision::Bf16), run_reference(c, in), b16 ? 1e-2 : 1e-5,
               b16 ? "onednn bf16 products" : "onednn bf16 inputs, fp32 products");
}

std::vector<Case> onednn_cases() {
  std::vector<Case> out;
  for (int64_t S : {1, 7, 64, 1000})
    for (bool docs : {false, true})
      for (int64_t kv : {4, 1}) {
        if (docs && S < 7) continue;
        out.push_back({S, 4, kv, 16, docs, S >= 1000 ? AttnBlocks{128, 128} : AttnBlocks{16, 24}});
      }
  out.push_back({333, 2, 1, 64, true, {64, 48}});   // blocks that divide nothing
  out.push_back({130, 4, 2, 128, true, {33, 70}});  // D 128, odd blocks
  out.push_back({97, 3, 3, 24, false, {13, 9}});    // D not a multiple of 16
  out.push_back({1000, 4, 1, 16, true, {128, 128}, test_isa(), 100});  // windows
  out.push_back({333, 2, 2, 32, true, {16, 24}, test_isa(), 7});
  out.push_back({97, 3, 3, 24, false, {13, 9}, test_isa(), 20});
  out.push_back({1000, 4, 4, 16, false, {128, 128}, test_isa(), 1});
  out.push_back({333, 2, 1, 64, true, {64, 48}, Isa::Generic});  // the softmax's scalar row pieces
  return out;
}

INSTANTIATE_TEST_SUITE_P(Sizes, OneDnnVsReference, ::testing::ValuesIn(onednn_cases()),
                         [](const auto& info) {
                           const Case& c = info.param;
                           std::string name = "S" + std::to_string(c.S) + (c.documents ? "_docs" : "_causal") +
                                              "_gqa" + std::to_string(c.H / c.KV) + "_D" + std::to_string(c.D);
                           if (c.isa == Isa::Generic) name += "_generic";
                           return c.window ? name + "_W" + std::to_string(c.window) : name;
                         });

// The tile path with every product on the matrix engine's kernel, emulated (every CPU; on
// a CPU with AMX the suite above runs the real one where the shapes allow), against the
// definition on bf16-rounded inputs, to the bf16 bound.
class MatrixEngineVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(MatrixEngineVsReference, ForwardAndBackwardMatch) {
  const Case c = GetParam();
  Inputs in = make_inputs(c, 31);
  for (std::vector<float>* x : {&in.q, &in.k, &in.v, &in.dout})
    for (float& e : *x) e = to_f32(to_bf16(e));
  expect_close(c, run_onednn(c, in, Precision::Bf16, TileEngine::Emulated), run_reference(c, in), 1e-2,
               "matrix engine (emulated)");
}

INSTANTIATE_TEST_SUITE_P(Sizes, MatrixEngineVsReference,
                         ::testing::Values(Case{333, 2, 1, 64, true, {64, 64}},      // edges in every block
                                           Case{1000, 4, 2, 16, false, {128, 128}},  // D 16, GQA
                                           Case{130, 4, 4, 128, true, {32, 32}},     // D 128
                                           Case{97, 3, 3, 32, false, {16, 96}},      // one key block
                                           Case{333, 2, 2, 48, true, {48, 32}, test_isa(), 7}),  // D 48, window
                         [](const auto& info) {
                           const Case& c = info.param;
                           return "S" + std::to_string(c.S) + "_D" + std::to_string(c.D) + "_B" +
                                  std::to_string(c.blocks.q) + "x" + std::to_string(c.blocks.k) +
                                  (c.window ? "_W" + std::to_string(c.window) : std::string());
                         });

// The rising scores of the fused path's test on the tile path's bf16 products, through oneDNN
// and on the matrix engine (emulated), at D = 64 and 128: the bf16 bound, and the LSE to
// 1e-5. The LSE holds only while q's part of the softmax scale rounds nothing: q packed with
// 1/sqrt(128) itself was rounded to bf16 twice (LSE 2e-5 off, O and dK 1e-2).
TEST(OneDnnAttention, ScoresRisingAcrossKeyBlocksMatchTheReference) {
  for (int64_t D : {64, 128})
    for (TileEngine engine : {TileEngine::Auto, TileEngine::Emulated}) {
      const Case c{400, 4, 2, D, true, {128, 128}};
      Inputs in = rising_inputs(c);
      for (std::vector<float>* x : {&in.q, &in.k, &in.v, &in.dout})
        for (float& e : *x) e = to_f32(to_bf16(e));
      const Outputs got = run_onednn(c, in, Precision::Bf16, engine), want = run_reference(c, in);
      const char* what = engine == TileEngine::Emulated ? "rising, matrix engine" : "rising, onednn bf16";
      expect_close(c, got, want, 3e-2, what);
      double abs_diff;
      EXPECT_LT(max_rel(got.lse, want.lse, &abs_diff), 1e-5) << what << " D=" << D;
    }
}

// Sums in a fixed order: the same bits on 1 and on every thread, call after call.
TEST(OneDnnAttention, BackwardIsBitwiseRepeatableOnAnyThreadCount) {
  const Case c{1000, 4, 1, 32, true, {64, 64}};
  const Inputs in = make_inputs(c, 9);
  const int threads = omp_get_max_threads();
  // fp32 through oneDNN, and bf16 with the matrix engine's products (emulated)
  for (const auto& [precision, engine] : {std::pair{Precision::Fp32, TileEngine::Auto},
                                          std::pair{Precision::Bf16, TileEngine::Emulated}}) {
    std::vector<Outputs> runs;
    for (int t : {threads, 1, threads}) {
      omp_set_num_threads(t);
      runs.push_back(run_onednn(c, in, precision, engine));
    }
    omp_set_num_threads(threads);
    for (int t = 0; t < 5; ++t) {
      EXPECT_EQ(*runs[1].all(t), *runs[0].all(t)) << t << " " << precision_name(precision);
      EXPECT_EQ(*runs[2].all(t), *runs[0].all(t)) << t << " " << precision_name(precision);
    }
  }
}

// The softmax's exponentials on every path: e^x to the polynomial's accuracy (plus the
// rounding of x log2 e, which grows with |x|) down to 2^-124, and exactly +0 for masked (-inf)
// scores. Below that, never negative or NaN: the vector code gives exactly +0 at 2^-127 and
// below (std::exp2, of the generic path and the vectors' tails, a denormal). The vector paths
// skip exp2's clamp and zeroing here (their exponents are at most 0): this pins what is left.
TEST(SoftmaxRows, ExponentialsAreExpAndMaskedScoresExactlyZero) {
  std::vector<float> x{-std::numeric_limits<float>::infinity()};
  for (float v = -100.0f; v <= 0.5f; v += 0.0371f) x.push_back(v);
  for (float v : {-88.03f, -88.0297f, -88.02969f, -87.5f, -87.34f, -87.0f}) x.push_back(v);
  const int64_t n = int64_t(x.size());
  const float lo_exact = -86.0f, zero_below = -88.0297f;  // 2^-124.07 and 2^-127 (in e^x)
  for (Isa isa : test_isas()) {
    const IsaKernels* k = isa_kernels(isa);
    const int64_t vectors = isa == Isa::Generic ? 0 : n / k->width * k->width;
    std::vector<float> e = x, s = x, dp(x.size(), 2.0f);
    const float sum = k->exp_shift_sum(e.data(), n, 0.0f);
    k->probs_and_grads(s.data(), dp.data(), n, 0.0f, 1.0f);  // s = e^x, dp = e^x (2 - 1)
    double want_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const size_t u = size_t(i);
      const double want = std::exp(double(x[u]));
      want_sum += want;
      SCOPED_TRACE(::testing::Message() << "path " << int(isa) << ", x " << x[u]);
      for (float got : {e[u], s[u], dp[u]}) {
        if (x[u] >= lo_exact)
          ASSERT_NEAR(got, want, want * (2.5e-7 + 1e-7 * std::fabs(x[u])));
        else if (i == 0 || (i < vectors && x[u] < zero_below))
          ASSERT_TRUE(got == 0.0f && !std::signbit(got)) << got;
        else
          ASSERT_TRUE(got >= 0.0f && got <= 0x1p-124f) << got;
      }
    }
    EXPECT_NEAR(sum, want_sum, want_sum * 1e-6) << int(isa);
  }
}

// The exponentials of a p that is stored in bf16 (AVX-512: Simd::exp2_bf16's degree-3
// polynomial, 7.5e-5 relative; elsewhere the fp32 ones): each stored p within half a bf16 ulp
// plus 1e-4 of e^x, the fp32 sum they return within 1e-4, exactly +0 for masked scores.
TEST(SoftmaxRows, Bf16ExponentialsAreExpToTheirPolynomial) {
  std::vector<float> x{-std::numeric_limits<float>::infinity()};
  for (float v = -80.0f; v <= 0.5f; v += 0.00731f) x.push_back(v);
  const int64_t n = int64_t(x.size());
  for (Isa isa : test_isas()) {
    const IsaKernels* k = isa_kernels(isa);
    std::vector<bf16> p(x.size());
    const float sum = k->exp_shift_sum_bf16(x.data(), n, 0.0f, p.data());
    double want_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const size_t u = size_t(i);
      const double want = std::exp(double(x[u])), got = double(to_f32(p[u]));
      want_sum += want;
      SCOPED_TRACE(::testing::Message() << "path " << int(isa) << ", x " << x[u]);
      if (i == 0) ASSERT_TRUE(got == 0.0 && !std::signbit(got)) << got;
      else ASSERT_NEAR(got, want, want * (0x1p-8 + 1e-4 + 1e-7 * std::fabs(x[u])));  // bf16: 8 bits
    }
    EXPECT_NEAR(sum, want_sum, want_sum * 1e-4) << int(isa);
  }
}

// The packed keys' transpose (a W x W register block at a time) against KeyBlockLayout's plain
// indexing: rows not a multiple of the vector width, a row stride wider than D, bf16 rows,
// and zeros (not stale values) in the rows past n.
TEST(KeyPacking, TransposeIsTheChunkedLayoutOnEveryPath) {
  const int64_t np = 128, ld = 3 * 64 + 16;
  std::vector<float> x(size_t(np * ld));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int64_t(i * 7919 % 255) - 127) / 64.0f;  // exact in bf16
  std::vector<bf16> x16(x.size());
  for (size_t i = 0; i < x.size(); ++i) x16[i] = to_bf16(x[i]);
  for (Isa isa : test_isas()) {
    const IsaKernels* k = isa_kernels(isa);
    for (int64_t D : {int64_t(k->width), int64_t(64)})
      for (int64_t n : {np, np - 1, int64_t(37), int64_t(1)}) {
        SCOPED_TRACE(::testing::Message() << "path " << int(isa) << ", D " << D << ", n " << n);
        const KeyBlockLayout to{D, np, k->key_chunk, k->key_panel};
        std::vector<float> got(size_t(np * D), 99.0f), got16(size_t(np * D), 99.0f);
        k->transpose_keys(x.data() + 16, ld, n, D, np, 0.75f, got.data());
        k->transpose_keys_bf16(x16.data() + 16, ld, n, D, np, 0.75f, got16.data());
        int64_t wrong = 0;
        for (int64_t c = 0; c < np; ++c)
          for (int64_t i = 0; i < D; ++i) {
            const float want = c < n ? x[size_t(c * ld + 16 + i)] * 0.75f : 0.0f;
            wrong += got[size_t(to.chunked(i, c))] != want || got16[size_t(to.chunked(i, c))] != want;
          }
        EXPECT_EQ(wrong, 0);
      }
  }
}

}  // namespace
}  // namespace lct
