// Llama model configuration, field names identical to Hugging Face's LlamaConfig so a real
// checkpoint's config.json maps onto it one to one.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/provenance.hpp"

namespace lct {

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

  int64_t head_dim() const { return hidden_size / num_attention_heads; }  // D
  int64_t num_parameters() const;
  // Throws lct::Error naming `where` (a file, a preset, "command line") and the broken rule.
  void validate(const std::string& where) const;

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
  }
  // Fields a file may lack (their default then holds).
  static bool optional_field(const std::string& name) { return name == "sliding_window"; }
};

// The warning train and eval print when their sequences are longer than the model was made
// for (RoPE then reaches positions it was not meant for); "" when they fit.
std::string seq_len_warning(const ModelConfig& c, int64_t seq_len);

// Named presets: "tiny" (tests), "small" (the default job), "30m" (the benchmark model).
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

}  // namespace lct
