// Model configuration, parameter layout and initialisation.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>
#include <omp.h>

#include "common/error.hpp"
#include "model/init.hpp"
#include "model/params.hpp"
#include "model/tp.hpp"
#include "sys/memory.hpp"
#include "train/optimizer.hpp"

namespace lct {
namespace {

TEST(ModelConfig, PresetsAreValidAndTheBenchmarkModelHasItsSizes) {
  for (const auto& name : model_preset_names()) EXPECT_NO_THROW(model_preset(name).validate(name));
  const ModelConfig m = model_preset("30m");
  EXPECT_EQ(m.hidden_size, 512);
  EXPECT_EQ(m.num_hidden_layers, 8);
  EXPECT_EQ(m.num_attention_heads, 8);
  EXPECT_EQ(m.intermediate_size, 1408);
  EXPECT_TRUE(m.num_key_value_heads == 2 || m.num_key_value_heads == 4);
  EXPECT_THROW(model_preset("huge"), Error);
}

TEST(ModelConfig, ValidationNamesTheBrokenRule) {
  ModelConfig c = model_preset("tiny");
  c.num_key_value_heads = 3;
  try {
    c.validate("here");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_key_value_heads 3"), std::string::npos);
  }
  c = model_preset("tiny");
  c.hidden_size = 66;  // not divisible by 4 heads
  EXPECT_THROW(c.validate("here"), Error);
  c.hidden_size = 72;  // head_dim 18: fine
  EXPECT_NO_THROW(c.validate("here"));
  c.num_attention_heads = 8;  // head_dim 9: odd, RoPE cannot rotate pairs
  c.num_key_value_heads = 2;
  EXPECT_THROW(c.validate("here"), Error);
}

TEST(ParamLayout, HuggingFaceNamesShapesAndAlignedOffsets) {
  ModelConfig c = model_preset("tiny");
  const ParamLayout p = ParamLayout::llama(c);
  EXPECT_EQ(p.num_parameters(), size_t(c.num_parameters()));
  const TensorSpec* q = p.find("model.layers.1.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(p.find("model.layers.0.self_attn.k_proj.weight")->shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(p.find("model.layers.0.mlp.down_proj.weight")->shape, (std::vector<int64_t>{64, 176}));
  EXPECT_NE(p.find("lm_head.weight"), nullptr);
  for (const auto& t : p.tensors) EXPECT_EQ(t.offset % 16, 0u) << t.name;
  c.tie_word_embeddings = true;
  const ParamLayout tied = ParamLayout::llama(c);
  EXPECT_EQ(tied.find("lm_head.weight"), nullptr);
  Buffer<float> buf(tied.total);
  const ModelTensors m = carve(tied, c, buf.data());
  EXPECT_EQ(m.lm_head, m.embed);
  EXPECT_EQ(m.layers[1].w_down, buf.data() + tied.find("model.layers.1.mlp.down_proj.weight")->offset);
}

TEST(LlamaInit, NormalMatricesUnitNormsIndependentOfThreads) {
  const ModelConfig c = model_preset("tiny");
  const ParamLayout p = ParamLayout::llama(c);
  Buffer<float> a(p.total), b(p.total);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  llama_init(p, c, 42, a.data());
  omp_set_num_threads(2);
  llama_init(p, c, 42, b.data());
  omp_set_num_threads(saved);
  for (size_t i = 0; i < p.total; ++i) ASSERT_EQ(a[i], b[i]) << i;
  const TensorSpec* e = p.find("model.embed_tokens.weight");
  double sum = 0, sq = 0;
  for (size_t i = 0; i < e->numel; ++i) {
    sum += a[e->offset + i];
    sq += double(a[e->offset + i]) * a[e->offset + i];
  }
  const double mean = sum / double(e->numel), std = std::sqrt(sq / double(e->numel) - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.002);
  EXPECT_NEAR(std, 0.02, 0.001);
  const TensorSpec* n = p.find("model.norm.weight");
  for (size_t i = 0; i < n->numel; ++i) EXPECT_EQ(a[n->offset + i], 1.0f);
}


// ZeRO-1's pieces: the shard ranges cover the array in order, on whole cache lines; AdamW
// over shards updates each parameter exactly as over the whole array (same bits), and its
// moments are the whole one's ranges.
// Parameters and gradients for the optimizer tests: deterministic, of both signs, varied.
std::pair<std::vector<float>, std::vector<float>> adam_inputs(size_t n) {
  std::vector<float> p(n), g(n);
  for (size_t i = 0; i < n; ++i) {
    p[i] = float(std::sin(double(i)));
    g[i] = float(std::cos(double(i) * 0.7));
  }
  return {p, g};
}

TEST(AdamW, ShardsUpdateBitwiseLikeTheWholeArray) {
  for (int n : {1, 2, 3, 7}) {
    const std::vector<size_t> b = shard_bounds(1000, n);
    ASSERT_EQ(b.size(), size_t(n) + 1);
    EXPECT_EQ(b.front(), 0u);
    EXPECT_EQ(b.back(), 1000u);
    for (int r = 0; r < n; ++r) {
      EXPECT_LE(b[size_t(r)], b[size_t(r) + 1]);
      if (r > 0 && b[size_t(r)] < 1000) {
        EXPECT_EQ(b[size_t(r)] % 64, 0u);
      }
    }
  }
  const ModelConfig c = model_preset("tiny");
  const ParamLayout layout = ParamLayout::llama(c);
  const auto [p0, g] = adam_inputs(layout.total);
  const AdamWConfig cfg;
  AdamW whole(layout, cfg);
  std::vector<float> pw = p0, ps = p0;
  const std::vector<size_t> b = shard_bounds(layout.total, 3);
  std::vector<AdamW> parts;
  for (int r = 0; r < 3; ++r) parts.emplace_back(layout, cfg, Shard{b[size_t(r)], b[size_t(r) + 1]});
  for (int64_t step = 1; step <= 3; ++step) {
    whole.step(pw.data(), g.data(), step, 1e-3, 0.5);
    for (AdamW& a : parts) a.step(ps.data(), g.data(), step, 1e-3, 0.5);
  }
  EXPECT_EQ(pw, ps);
  for (int r = 0; r < 3; ++r)
    for (size_t i = b[size_t(r)]; i < b[size_t(r) + 1]; ++i) {
      ASSERT_EQ(parts[size_t(r)].m()[i - b[size_t(r)]], whole.m()[i]);
      ASSERT_EQ(parts[size_t(r)].v()[i - b[size_t(r)]], whole.v()[i]);
    }
  EXPECT_NE(pw, p0);  // the steps did move the parameters
}

// ZeRO-3's units: the embedding, each layer, the head, contiguous and covering the layout;
// carve_layer over a unit's own copy points at the same tensors as carve over the whole.
TEST(ParamLayout, UnitsCoverTheLayoutAndCarveLayerMatchesCarve) {
  for (bool tied : {false, true}) {
    ModelConfig c = model_preset("tiny");
    c.tie_word_embeddings = tied;
    const ParamLayout layout = ParamLayout::llama(c);
    const std::vector<size_t> u = unit_bounds(layout, c);
    ASSERT_EQ(u.size(), size_t(c.num_hidden_layers) + 3);
    EXPECT_EQ(u.front(), 0u);
    EXPECT_EQ(u.back(), layout.total);
    EXPECT_EQ(u[1], layout.find("model.layers.0.input_layernorm.weight")->offset);
    EXPECT_EQ(u[size_t(c.num_hidden_layers) + 1], layout.find("model.norm.weight")->offset);
    std::vector<float> whole(layout.total);
    const ModelTensors w = carve(layout, c, whole.data());
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      float* unit = whole.data() + u[size_t(l) + 1];
      const LayerTensors a = carve_layer(layout, l, unit), e = w.layers[size_t(l)];
      EXPECT_EQ(a.input_norm, e.input_norm);
      EXPECT_EQ(a.wq, e.wq);
      EXPECT_EQ(a.wo, e.wo);
      EXPECT_EQ(a.post_norm, e.post_norm);
      EXPECT_EQ(a.w_down, e.w_down);
      EXPECT_LT(a.w_down, whole.data() + u[size_t(l) + 2]);  // inside its unit
    }
  }
}

// ZeRO-3's optimizer: moments for a rank's pieces (one per unit), over arrays holding just
// those pieces back to back, update exactly as the whole array (same bits).
TEST(AdamW, PackedPiecesUpdateBitwiseLikeTheWholeArray) {
  const ModelConfig c = model_preset("tiny");
  const ParamLayout layout = ParamLayout::llama(c);
  const std::vector<size_t> u = unit_bounds(layout, c);
  const auto [p0, g] = adam_inputs(layout.total);
  const AdamWConfig cfg;
  AdamW whole(layout, cfg);
  std::vector<float> pw = p0;
  const int ranks = 3;
  std::vector<float> merged = p0;  // every rank's updated pieces, written back in place
  for (int r = 0; r < ranks; ++r) {
    std::vector<Shard> pieces;
    std::vector<float> ps, gs;
    for (size_t k = 0; k + 1 < u.size(); ++k) {
      const std::vector<size_t> b = shard_bounds(u[k + 1] - u[k], ranks);
      pieces.push_back({u[k] + b[size_t(r)], u[k] + b[size_t(r) + 1]});
      ps.insert(ps.end(), p0.begin() + long(pieces.back().begin), p0.begin() + long(pieces.back().end));
      gs.insert(gs.end(), g.begin() + long(pieces.back().begin), g.begin() + long(pieces.back().end));
    }
    AdamW part(layout, cfg, pieces);
    for (int64_t step = 1; step <= 3; ++step) part.step(ps.data(), gs.data(), step, 1e-3, 0.5);
    size_t at = 0;
    for (const Shard& s : pieces)
      for (size_t i = s.begin; i < s.end; ++i, ++at) merged[i] = ps[at];
  }
  for (int64_t step = 1; step <= 3; ++step) whole.step(pw.data(), g.data(), step, 1e-3, 0.5);
  EXPECT_EQ(pw, merged);
  EXPECT_NE(pw, p0);
}
// A rank's range of the flat layout (a ZeRO shard: any run of entries, starting and ending
// mid-row) as blocks of the whole tensor (what a checkpoint writes as hyperslabs).
TEST(CheckpointBlocks, FlatRangesMapToRowsAndColumnsOfTheWholeTensor) {
  ModelConfig c = model_preset("tiny");  // C 64, I 176, 4 heads / 2 KV heads of 16
  c.vocab_size = 260;
  const ParamLayout full = ParamLayout::llama(c), half = ParamLayout::llama(c, 2);
  auto w = [&](const char* n) { return *full.find(n); };
  auto l = [&](const char* n) { return *half.find(n); };
  using B = std::vector<TensorBlock>;
  const TpSplit one{1, 0}, second{2, 1};
  const char* q = "model.layers.0.self_attn.q_proj.weight";  // [64, 64]; tp 2: rows
  const char* o = "model.layers.0.self_attn.o_proj.weight";  // [64, 64]; tp 2: columns
  const char* down = "model.layers.1.mlp.down_proj.weight";   // [64, 176]; tp 2: columns
  const char* norm = "model.layers.1.input_layernorm.weight"; // [64], replicated
  const char* embed = "model.embed_tokens.weight";            // [260, 64]; tp 2: rows
  // Mid-row to mid-row: the rest of row 1, row 2, the start of row 3.
  EXPECT_EQ(tp_blocks(w(q), w(q), one, 70, 200), (B{{1, 6, 1, 58}, {2, 0, 1, 64}, {3, 0, 1, 8}}));
  EXPECT_EQ(tp_blocks(w(q), w(q), one, 5, 9), (B{{0, 5, 1, 4}}));        // inside one row
  EXPECT_EQ(tp_blocks(w(q), w(q), one, 64, 192), (B{{1, 0, 2, 64}}));    // whole rows
  EXPECT_EQ(tp_blocks(w(q), w(q), one, 70, 128), (B{{1, 6, 1, 58}}));    // to a row's end
  EXPECT_EQ(tp_blocks(w(q), w(q), one, 64, 130), (B{{1, 0, 1, 64}, {2, 0, 1, 2}}));
  EXPECT_EQ(tp_blocks(w(q), w(q), one, 10, 10), B{});                    // empty ranges
  EXPECT_EQ(tp_blocks(w(q), w(q), one, 20, 10), B{});
  EXPECT_THROW(tp_blocks(w(q), w(q), one, 0, 64 * 64 + 1), Error);
  // tp rank 1 of 2: row-cut slices sit below rank 0's rows, column-cut ones right of its columns.
  EXPECT_EQ(tp_blocks(w(q), l(q), second, 70, 200), (B{{33, 6, 1, 58}, {34, 0, 1, 64}, {35, 0, 1, 8}}));
  EXPECT_EQ(tp_blocks(w(o), l(o), second, 40, 100), (B{{1, 40, 1, 24}, {2, 32, 1, 32}, {3, 32, 1, 4}}));
  EXPECT_EQ(tp_blocks(w(down), l(down), second, 0, 64 * 88), (B{{0, 88, 64, 88}}));
  EXPECT_EQ(tp_blocks(w(embed), l(embed), second, 0, 130 * 64), (B{{130, 0, 130, 64}}));
  EXPECT_EQ(tp_blocks(w(norm), l(norm), second, 10, 30), (B{{10, 0, 20, 1}}));  // 1-D: [64, 1]

  // Every tensor, both tp ranks (and tp 1), ranges cut at odd places: the blocks, read in
  // row-major order out of the whole array, are exactly the slice's entries a..b.
  std::vector<float> whole(full.total);
  for (size_t i = 0; i < whole.size(); ++i) whole[i] = float(i);
  for (int tp : {1, 2})
    for (int r = 0; r < tp; ++r) {
      const ParamLayout& lay = tp == 1 ? full : half;
      std::vector<float> mine(lay.total);
      tp_take_local(full, lay, {tp, r}, whole.data(), mine.data());
      for (size_t t = 0; t < full.tensors.size(); ++t) {
        const TensorSpec &wt = full.tensors[t], &lt = lay.tensors[t];
        const int64_t X = wt.shape.size() == 2 ? wt.shape[1] : 1;
        for (size_t a : {size_t(0), size_t(1), size_t(37), lt.numel / 3})
          for (size_t b : {a, a + 1, a + 95, lt.numel - 7, lt.numel}) {
            if (b > lt.numel) continue;
            size_t k = a;
            for (const TensorBlock& blk : tp_blocks(wt, lt, {tp, r}, a, b))
              for (int64_t i = 0; i < blk.rows; ++i)
                for (int64_t j = 0; j < blk.cols; ++j, ++k)
                  ASSERT_EQ(whole[wt.offset + size_t((blk.row + i) * X + blk.col + j)], mine[lt.offset + k])
                      << wt.name << " tp " << tp << " rank " << r << " [" << a << ", " << b << ")";
            EXPECT_EQ(k, std::max(a, b)) << wt.name << " [" << a << ", " << b << ")";
          }
      }
    }
}

}  // namespace
}  // namespace lct
