// The model against an independent PyTorch implementation (tests/golden/torch_reference.py):
// loss, every parameter gradient, and five AdamW steps.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>

#include "io/arrays.hpp"
#include "io/model_file.hpp"
#include "model/init.hpp"
#include "test_isa.hpp"
#include "test_rope_scaling.hpp"
#include "train/trainer.hpp"

#ifndef LCT_PYTHON
#define LCT_PYTHON "/usr/bin/python3"
#endif
#ifndef LCT_TORCH_REFERENCE
#define LCT_TORCH_REFERENCE "tests/golden/torch_reference.py"
#endif

namespace lct {
namespace {

namespace fs = std::filesystem;

struct GoldenCase {
  const char* name;
  int64_t heads, kv_heads;
  bool tied;
  Checkpointing checkpointing;
  Precision precision = Precision::Fp32;
  int64_t window = 0;  // sliding_window
  RopeScaling rope = {};  // rope_scaling (none by default)
  int64_t max_pos = 0;    // max_position_embeddings; 0 = the preset's (4096)
  bool weighted = false;  // per-target loss weights (0 to 1.5, some 0)
  int64_t mlp_tile = 0;   // tokens per MLP tile (0: untiled)
};

RopeScaling yarn_mscale(double factor, int64_t original, double mscale, double mscale_all_dim,
                        double beta_fast, double beta_slow) {
  RopeScaling r = rope_scaling("yarn", factor, original);
  r.mscale = mscale;
  r.mscale_all_dim = mscale_all_dim;
  r.beta_fast = beta_fast;
  r.beta_slow = beta_slow;
  r.truncate = false;
  return r;
}

void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.name; }

class Golden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(Golden, LossGradientsAndAdamWStepsMatchPyTorch) {
  const GoldenCase gc = GetParam();
  const fs::path dir = fs::temp_directory_path() / ("lct_golden_" + std::to_string(::getpid()) + gc.name);
  fs::create_directories(dir);

  ModelConfig c = model_preset("tiny");
  c.num_attention_heads = gc.heads;
  c.num_key_value_heads = gc.kv_heads;
  c.tie_word_embeddings = gc.tied;
  c.sliding_window = gc.window;
  c.rope_scaling = gc.rope;
  if (gc.max_pos > 0) c.max_position_embeddings = gc.max_pos;
  c.rope_theta = 500.0;  // short sequences still turn the rotations a long way
  c.initializer_range = 0.08;  // larger weights: attention is far from uniform

  // Documents of odd lengths, packed next-fit into sequences of 48 with padding.
  TokenDataset ds;
  ds.vocab_size = c.vocab_size;
  ds.pad_id = 258;
  ds.doc_offsets = {0};
  std::mt19937 gen(3);
  for (int len : {7, 13, 21, 1, 31, 11, 5, 17}) {
    for (int i = 0; i < len; ++i) ds.tokens.push_back(int32_t(gen() % 256));
    ds.doc_offsets.push_back(int64_t(ds.tokens.size()));
  }
  const int64_t S = 48;
  const Packing packing = pack_documents(ds.doc_offsets, S);
  std::vector<const PackedSequence*> seqs;
  for (const auto& s : packing.sequences) seqs.push_back(&s);
  Batch batch = make_batch(ds, seqs, S);
  ASSERT_GE(batch.B, 3);
  if (gc.weighted) {
    batch.weights.assign(batch.targets.size(), 0.0f);
    for (size_t t = 0; t < batch.targets.size(); ++t)
      if (batch.targets[t] >= 0) batch.weights[t] = float(gen() % 7) * 0.25f;
  }

  ModelShape shape{batch.tokens_total(), S, gc.checkpointing, {16, 16}, test_isa(), gc.precision};
  shape.mlp_tile = gc.mlp_tile;
  LlamaModel model(c, shape);
  // Against the fp64 reference: fp32 agrees to rounding; bf16 products (8-bit mantissas) to
  // the bounds: loss 5e-3, every gradient 2e-2 (max abs diff / max abs), relative.
  const bool b16 = gc.precision == Precision::Bf16;
  const double loss_tol = b16 ? 5e-3 : 1e-4, grad_tol = b16 ? 2e-2 : 1e-4;
  const ParamLayout& layout = model.layout();
  llama_init(layout, c, 11, model.params());
  for (const TensorSpec& t : layout.tensors)  // norms away from 1 so their scale is tested
    if (t.kind == TensorKind::Norm)
      for (size_t i = 0; i < t.numel; ++i) model.params()[t.offset + i] += 0.3f * float(std::sin(double(i)));

  const AdamWConfig opt{3e-3, 3e-4, 2, 5, 0.9, 0.95, 1e-8, 0.1, false, 0.5};
  const int64_t steps = 5;
  const std::string model_file = (dir / "model.h5").string(), batch_file = (dir / "batch.h5").string();
  const std::string ref_file = (dir / "ref.h5").string();
  write_model_file(model_file, c, layout, model.params(), Provenance{}, true);
  const auto i32 = [&](const char* n, const std::vector<int32_t>& v) {
    return NamedArray{n, {int64_t(v.size())}, {}, v, {}};
  };
  std::vector<NamedArray> arrays = {i32("tokens", batch.tokens), i32("targets", batch.targets),
                                    i32("doc", batch.doc), i32("idx", batch.idx), i32("pos", batch.pos)};
  if (gc.weighted) arrays.push_back({"weights", {int64_t(batch.weights.size())}, batch.weights, {}, {}});
  write_array_file(batch_file, arrays,
                   {{"lr", opt.lr}, {"min_lr", opt.min_lr}, {"warmup_steps", opt.warmup_steps},
                    {"total_steps", opt.total_steps}, {"beta1", opt.beta1}, {"beta2", opt.beta2},
                    {"eps", opt.eps}, {"weight_decay", opt.weight_decay}, {"grad_clip", opt.grad_clip},
                    {"steps", steps}, {"seq_len", S}},
                   true);
  const std::string cmd = std::string(LCT_PYTHON) + " " + LCT_TORCH_REFERENCE + " --model " +
                          model_file + " --batch " + batch_file + " --out " + ref_file;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  // Loss and gradients of the first step.
  PhaseClock clock;
  model.zero_grads();
  // Normalised as the trainer does: by the summed target weights (the count when unweighted).
  const double loss = model.forward_backward(batch, 1.0f / float(batch.target_weight()), clock) /
                      batch.target_weight();
  const double ref_loss = read_array_f64(ref_file, "loss")[0];
  std::printf("%s: loss %.8f, torch %.8f, rel diff %.2e\n", gc.name, loss, ref_loss,
              std::abs(loss - ref_loss) / ref_loss);
  EXPECT_LT(std::abs(loss - ref_loss) / ref_loss, loss_tol);
  for (const TensorSpec& t : layout.tensors) {
    const std::vector<double> ref = read_array_f64(ref_file, "grad/" + t.name);
    ASSERT_EQ(ref.size(), t.numel) << t.name;
    double diff = 0, scale = 0;
    for (size_t i = 0; i < t.numel; ++i) {
      diff = std::max(diff, std::abs(double(model.grads()[t.offset + i]) - ref[i]));
      scale = std::max(scale, std::abs(ref[i]));
    }
    std::printf("  grad %-46s max abs %.2e  rel %.2e\n", t.name.c_str(), diff, diff / scale);
    EXPECT_GT(scale, 0.0) << t.name << " has no gradient in the reference";
    EXPECT_LT(diff / scale, grad_tol) << t.name;
  }

  // Five AdamW steps on the same batch (fresh optimiser; the weights are still the initial ones).
  Trainer trainer(model, opt);
  const std::vector<double> ref_losses = read_array_f64(ref_file, "step_losses");
  const std::vector<double> ref_norms = read_array_f64(ref_file, "step_grad_norms");
  for (int64_t s = 1; s <= steps; ++s) {
    const StepStats st = trainer.train_step({batch}, s, clock);
    std::printf("  step %lld loss %.8f torch %.8f  grad norm %.6f torch %.6f\n", (long long)s,
                st.loss, ref_losses[size_t(s - 1)], st.grad_norm, ref_norms[size_t(s - 1)]);
    EXPECT_LT(std::abs(st.loss - ref_losses[size_t(s - 1)]) / ref_losses[size_t(s - 1)], loss_tol);
    EXPECT_LT(std::abs(st.grad_norm - ref_norms[size_t(s - 1)]) / ref_norms[size_t(s - 1)], grad_tol);
  }
  const double final_loss = model.forward(batch, clock) / batch.target_weight();
  std::printf("  after %lld steps loss %.8f torch %.8f\n", (long long)steps, final_loss, ref_losses.back());
  EXPECT_LT(std::abs(final_loss - ref_losses.back()) / ref_losses.back(), loss_tol);
  EXPECT_LT(final_loss, ref_losses.front());  // the steps did learn
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Models, Golden,
    ::testing::Values(GoldenCase{"gqa2_untied", 4, 2, false, Checkpointing::None},
                      GoldenCase{"gqa4_tied_fullckpt", 4, 1, true, Checkpointing::Full},
                      GoldenCase{"mha_attnckpt", 4, 4, false, Checkpointing::Attention},
                      GoldenCase{"gqa2_untied_bf16", 4, 2, false, Checkpointing::None, Precision::Bf16},
                      GoldenCase{"gqa4_tied_fullckpt_bf16", 4, 1, true, Checkpointing::Full, Precision::Bf16},
                      GoldenCase{"mha_attnckpt_bf16", 4, 4, false, Checkpointing::Attention, Precision::Bf16},
                      // Sliding windows shorter than most documents (lengths 1 to 31).
                      GoldenCase{"gqa2_window5", 4, 2, false, Checkpointing::None, Precision::Fp32, 5},
                      GoldenCase{"gqa4_window9_attnckpt", 4, 1, false, Checkpointing::Attention,
                                 Precision::Fp32, 9},
                      GoldenCase{"gqa2_window5_bf16", 4, 2, false, Checkpointing::None, Precision::Bf16, 5},
                      // Loss weights: weighted terms, normalised by the summed weights.
                      GoldenCase{"gqa2_loss_weights", 4, 2, false, Checkpointing::None, Precision::Fp32, 0,
                                 {}, 0, true},
                      // Hugging Face's rope_scaling on sequences of 48 (rope_theta 500, D 16).
                      GoldenCase{"gqa2_rope_linear", 4, 2, false, Checkpointing::None,
                                 Precision::Fp32, 0, rope_scaling("linear", 4)},
                      // max_position_embeddings 16 < 48: the NTK base grows (x 9^(8/7)).
                      GoldenCase{"gqa2_rope_dynamic", 4, 2, false, Checkpointing::None,
                                 Precision::Fp32, 0, rope_scaling("dynamic", 4), 16},
                      // original 16: dimension 0 kept, 1 half-interpolated, 2-7 divided by 3;
                      // cos and sin x (0.1 ln 3 + 1).
                      GoldenCase{"gqa4_rope_yarn_attnckpt", 4, 1, false, Checkpointing::Attention,
                                 Precision::Fp32, 0, rope_scaling("yarn", 3, 16), 48},
                      // mscale 2 / mscale_all_dim 1, betas 16 / 2 and an untruncated ramp
                      // (0 to 1.72: dimension 1 is 58% interpolated).
                      GoldenCase{"mha_rope_yarn_mscale_fullckpt", 4, 4, false, Checkpointing::Full,
                                 Precision::Fp32, 0, yarn_mscale(4, 48, 2, 1, 16, 2), 96},
                      // original 32, factors 1 / 4: wavelength 6.3 kept (< 8), 14 and 30
                      // smoothed, 65 and longer divided by 4.
                      GoldenCase{"gqa2_rope_llama3", 4, 2, false, Checkpointing::None,
                                 Precision::Fp32, 0, llama3_scaling(4, 32, 1, 4), 128},
                      // The MLP over tiles of 37 tokens (the last one shorter), and of 50
                      // under full recomputation.
                      GoldenCase{"gqa2_mlp_tile37", 4, 2, false, Checkpointing::None, Precision::Fp32, 0, {}, 0,
                                 false, 37},
                      GoldenCase{"gqa4_tied_fullckpt_mlp_tile50_bf16", 4, 1, true, Checkpointing::Full,
                                 Precision::Bf16, 0, {}, 0, false, 50},
                      GoldenCase{"mha_attnckpt_mlp_tile16", 4, 4, false, Checkpointing::Attention,
                                 Precision::Fp32, 0, {}, 0, false, 16}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace lct
