#include "model/config.hpp"

#include <climits>

#include "common/error.hpp"

namespace lct {

namespace {

ModelConfig make(int64_t c, int64_t i, int64_t l, int64_t h, int64_t kv, int64_t max_pos) {
  ModelConfig m;
  m.vocab_size = 259;  // the byte tokenizer: 256 bytes + BOS, EOS, PAD
  m.hidden_size = c;
  m.intermediate_size = i;
  m.num_hidden_layers = l;
  m.num_attention_heads = h;
  m.num_key_value_heads = kv;
  m.max_position_embeddings = max_pos;
  return m;
}

struct Preset {
  const char* name;
  ModelConfig config;
};

const std::vector<Preset>& presets() {
  static const std::vector<Preset> list = {
      {"tiny", make(64, 176, 2, 4, 2, 4096)},
      {"small", make(256, 704, 4, 4, 2, 32768)},
      {"30m", make(512, 1408, 8, 8, 2, 262144)},
  };
  return list;
}

}  // namespace

ModelConfig model_preset(const std::string& name) {
  for (const auto& p : presets())
    if (name == p.name) return p.config;
  std::string known;
  for (const auto& p : presets()) known += cat(known.empty() ? "" : ", ", p.name);
  fail("unknown model preset '", name, "': choose one of ", known,
       ", or give every size explicitly");
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.push_back(p.name);
  return names;
}

std::string seq_len_warning(const ModelConfig& c, int64_t seq_len) {
  if (seq_len <= c.max_position_embeddings) return "";
  return cat("warning: --seq-len ", seq_len, " exceeds the model's max_position_embeddings ",
             c.max_position_embeddings);
}

int64_t ModelConfig::num_parameters() const {
  const int64_t c = hidden_size, d = head_dim();
  const int64_t attn = c * num_attention_heads * d * 2 + c * num_key_value_heads * d * 2;
  const int64_t mlp = 3 * c * intermediate_size;
  const int64_t per_layer = attn + mlp + 2 * c;
  return vocab_size * c * (tie_word_embeddings ? 1 : 2) + num_hidden_layers * per_layer + c;
}

void ModelConfig::validate(const std::string& where) const {
  auto positive = [&](const char* name, int64_t v) {
    if (v <= 0) fail(where, ": ", name, " is ", v, " but must be positive");
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("intermediate_size", intermediate_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("num_key_value_heads", num_key_value_heads);
  positive("max_position_embeddings", max_position_embeddings);
  if (hidden_size % num_attention_heads != 0)
    fail(where, ": hidden_size ", hidden_size, " is not divisible by num_attention_heads ",
         num_attention_heads, "; choose sizes with hidden_size = heads x head_dim");
  if (num_attention_heads % num_key_value_heads != 0)
    fail(where, ": num_attention_heads ", num_attention_heads,
         " is not divisible by num_key_value_heads ", num_key_value_heads,
         " (grouped-query attention shares each K/V head among a whole group of query heads)");
  if (head_dim() % 2 != 0)
    fail(where, ": head_dim ", head_dim(), " (hidden_size / num_attention_heads) is odd; ",
         "RoPE rotates pairs of dimensions, so it must be even");
  if (!(rope_theta > 0)) fail(where, ": rope_theta is ", rope_theta, " but must be positive");
  if (!(rms_norm_eps > 0)) fail(where, ": rms_norm_eps is ", rms_norm_eps, " but must be positive");
  if (sliding_window < 0 || sliding_window > INT32_MAX)
    fail(where, ": sliding_window is ", sliding_window, " but must be 0 (none) or a window of 1 to ",
         INT32_MAX, " tokens");
  if (!(initializer_range >= 0))
    fail(where, ": initializer_range is ", initializer_range, " but must be >= 0");
}

}  // namespace lct
