// Llama model configuration, field names identical to Hugging Face's LlamaConfig so a real
// checkpoint's config.json maps onto it one to one.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/provenance.hpp"

namespace lct {

// Hugging Face's `rope_scaling` dict, flattened: in model files each member is the root
// attribute `rope_scaling.NAME` (HDF5 has no dicts), every one optional (absent = the default
// here, so files written before it existed load unchanged). A value equal to its default
// means "not given" where Hugging Face's key is optional (0 = None for the numbers whose
// default Hugging Face computes). Formulas: model/rope.hpp.
struct RopeScaling {
  std::string rope_type;  // "" (or "default") = none; linear | dynamic | yarn | llama3
  double factor = 1.0;    // every type: >= 1
  int64_t original_max_position_embeddings = 0;  // llama3 (required), yarn (0 = max_position_embeddings)
  double low_freq_factor = 0.0, high_freq_factor = 0.0;  // llama3, required (Llama 3.1: 1 and 4)
  double beta_fast = 32.0, beta_slow = 1.0;              // yarn
  double attention_factor = 0.0;  // yarn: multiplies cos and sin; 0 = from factor (and mscale)
  double mscale = 0.0, mscale_all_dim = 0.0;  // yarn (DeepSeek): 0 = None
  bool truncate = true;                       // yarn: round the correction range outwards

  bool none() const;  // rope_type "" or "default": plain RoPE
};

// The parameters set (different from their defaults) that `r`'s rope_type does not read, as
// attribute names: what `init` refuses (Hugging Face only warns about unknown keys, so files
// with them still load).
std::vector<std::string> rope_scaling_unused(const RopeScaling& r);

struct ModelConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;        // C
  int64_t intermediate_size = 0;  // I, SwiGLU width
  int64_t num_hidden_layers = 0;  // L
  int64_t num_attention_heads = 0;  // H
  int64_t num_key_value_heads = 0;  // KV; H % KV == 0 (grouped-query attention)
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  double initializer_range = 0.02;  // std of the normal init of every matrix
  bool tie_word_embeddings = false;
  // Mistral-style sliding-window attention: each token sees itself and the W - 1 tokens
  // before it in its document. 0 = none (full causal; Hugging Face's null). Optional in
  // files: absent means 0 (files written before it existed).
  int64_t sliding_window = 0;
  RopeScaling rope_scaling;  // Hugging Face's rope_scaling; rope_type "" = none

  int64_t head_dim() const { return hidden_size / num_attention_heads; }  // D
  int64_t num_parameters() const;
  // Throws lct::Error naming `where` (a file, a preset, "command line") and the broken rule.
  void validate(const std::string& where) const;
  void validate_rope_scaling(const std::string& where) const;  // part of validate()

  // (name, value) of every field, in for_each_field order.
  std::vector<std::pair<std::string, Value>> values() const {
    std::vector<std::pair<std::string, Value>> out;
    for_each_field(*this, [&](const char* name, const auto& v) { out.emplace_back(name, Value(v)); });
    return out;
  }

  // Visits every field as (name, reference): the single list that writing, reading and
  // printing the configuration all use.
  template <class Self, class Visit>
  static void for_each_field(Self& c, Visit&& visit) {
    visit("vocab_size", c.vocab_size);
    visit("hidden_size", c.hidden_size);
    visit("intermediate_size", c.intermediate_size);
    visit("num_hidden_layers", c.num_hidden_layers);
    visit("num_attention_heads", c.num_attention_heads);
    visit("num_key_value_heads", c.num_key_value_heads);
    visit("max_position_embeddings", c.max_position_embeddings);
    visit("rope_theta", c.rope_theta);
    visit("rms_norm_eps", c.rms_norm_eps);
    visit("initializer_range", c.initializer_range);
    visit("tie_word_embeddings", c.tie_word_embeddings);
    visit("sliding_window", c.sliding_window);
    auto& r = c.rope_scaling;
    visit("rope_scaling.rope_type", r.rope_type);
    visit("rope_scaling.factor", r.factor);
    visit("rope_scaling.original_max_position_embeddings", r.original_max_position_embeddings);
    visit("rope_scaling.low_freq_factor", r.low_freq_factor);
    visit("rope_scaling.high_freq_factor", r.high_freq_factor);
    visit("rope_scaling.beta_fast", r.beta_fast);
    visit("rope_scaling.beta_slow", r.beta_slow);
    visit("rope_scaling.attention_factor", r.attention_factor);
    visit("rope_scaling.mscale", r.mscale);
    visit("rope_scaling.mscale_all_dim", r.mscale_all_dim);
    visit("rope_scaling.truncate", r.truncate);
  }
  // Fields a file may lack (their default then holds).
  static bool optional_field(const std::string& name) {
    return name == "sliding_window" || name.rfind("rope_scaling.", 0) == 0;
  }
};

// The warning train and eval print when their sequences are longer than the model was made
// for (RoPE then reaches positions it was not meant for); "" when they fit.
std::string seq_len_warning(const ModelConfig& c, int64_t seq_len);

// Named presets: "tiny" (tests), "small" (the default job), "30m" (the benchmark model).
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

}  // namespace lct
