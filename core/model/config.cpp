#include "model/config.hpp"

#include <climits>

#include "common/knobs.hpp"
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
  if (c.rope_scaling.rope_type == "dynamic")  // what dynamic is for: say so, not warn
    return cat("note: ", knob_name(Knob::SeqLen), " ", seq_len, " exceeds the model's max_position_embeddings ",
               c.max_position_embeddings, ": rope_scaling dynamic (factor ", c.rope_scaling.factor,
               ") raises the RoPE base for it");
  return cat("warning: ", knob_name(Knob::SeqLen), " ", seq_len, " exceeds the model's max_position_embeddings ",
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
  validate_rope_scaling(where);
}

namespace {
bool known_rope_type(const std::string& t) {
  return t.empty() || t == "default" || t == "linear" || t == "dynamic" || t == "yarn" || t == "llama3";
}
}  // namespace

bool RopeScaling::none() const { return rope_type.empty() || rope_type == "default"; }

// Hugging Face's rules (modeling_rope_utils' _validate_*_rope_parameters), where Hugging Face
// only warns about a value its formulas cannot use (llama3's high_freq_factor <= low_freq_factor
// divides by zero or flips the ramp; yarn's beta_fast < beta_slow reverses it), an error here.
void ModelConfig::validate_rope_scaling(const std::string& where) const {
  const RopeScaling& r = rope_scaling;
  const std::string t = r.rope_type;
  if (!known_rope_type(t))
    fail(where, ": rope_scaling.rope_type is '", t, "' but must be one of linear, dynamic, yarn, ",
         "llama3, or empty (none)");
  if (r.none()) return;
  const std::string of = cat(" (rope_scaling.rope_type ", t, ")");
  if (!(r.factor >= 1.0))
    fail(where, ": rope_scaling.factor is ", r.factor, " but must be >= 1", of,
         "; it is the context's extension (new length / original length): set it, e.g. ",
         "lctrain init ", knob_name(Knob::RopeFactor), " 4");
  if (r.original_max_position_embeddings < 0)
    fail(where, ": rope_scaling.original_max_position_embeddings is ",
         r.original_max_position_embeddings, " but must be positive (0 = not given)", of);
  if (t == "llama3") {
    if (r.original_max_position_embeddings == 0)
      fail(where, ": rope_scaling.original_max_position_embeddings is not given but llama3 needs it ",
           "(the context the model was pre-trained with; 8192 for Llama 3.1): set it, e.g. "
           "lctrain init ", knob_name(Knob::RopeOriginalMaxPositionEmbeddings), " 8192");
    if (!(r.low_freq_factor > 0) || !(r.high_freq_factor > 0))
      fail(where, ": rope_scaling.low_freq_factor is ", r.low_freq_factor,
           " and rope_scaling.high_freq_factor is ", r.high_freq_factor,
           " but llama3 needs both positive (Llama 3.1: 1 and 4): set them, e.g. lctrain init ",
           knob_name(Knob::RopeLowFreqFactor), " 1 ", knob_name(Knob::RopeHighFreqFactor), " 4");
    if (!(r.low_freq_factor < r.high_freq_factor))
      fail(where, ": rope_scaling.low_freq_factor ", r.low_freq_factor,
           " must be smaller than rope_scaling.high_freq_factor ", r.high_freq_factor,
           " (llama3 interpolates between the wavelengths original / high and original / low; "
           "Llama 3.1: 1 and 4)");
  }
  if (t == "yarn") {
    if (!(r.beta_fast > 0) || !(r.beta_slow > 0))
      fail(where, ": rope_scaling.beta_fast is ", r.beta_fast, " and rope_scaling.beta_slow is ",
           r.beta_slow, " but yarn needs both positive (the paper's and Hugging Face's 32 and 1)");
    if (r.beta_fast < r.beta_slow)
      fail(where, ": rope_scaling.beta_fast ", r.beta_fast, " is smaller than rope_scaling.beta_slow ",
           r.beta_slow, "; yarn needs beta_fast >= beta_slow (defaults 32 and 1)");
    if (!(r.attention_factor >= 0))
      fail(where, ": rope_scaling.attention_factor is ", r.attention_factor,
           " but must be positive (0 = not given: computed from factor and mscale)");
    if (!(r.mscale >= 0) || !(r.mscale_all_dim >= 0))
      fail(where, ": rope_scaling.mscale is ", r.mscale, " and rope_scaling.mscale_all_dim is ",
           r.mscale_all_dim, " but both must be >= 0 (0 = not given)");
  }
}

std::vector<std::string> rope_scaling_unused(const RopeScaling& r) {
  const RopeScaling d;
  const std::string t = r.none() ? "" : r.rope_type;
  std::vector<std::string> out;
  auto check = [&](const char* name, bool differs, bool used) {
    if (differs && !used) out.push_back(cat("rope_scaling.", name));
  };
  check("factor", r.factor != d.factor, !t.empty());
  check("original_max_position_embeddings",
        r.original_max_position_embeddings != d.original_max_position_embeddings,
        t == "llama3" || t == "yarn");  // dynamic: Hugging Face reads max_position_embeddings
  check("low_freq_factor", r.low_freq_factor != d.low_freq_factor, t == "llama3");
  check("high_freq_factor", r.high_freq_factor != d.high_freq_factor, t == "llama3");
  check("beta_fast", r.beta_fast != d.beta_fast, t == "yarn");
  check("beta_slow", r.beta_slow != d.beta_slow, t == "yarn");
  check("attention_factor", r.attention_factor != d.attention_factor, t == "yarn");
  check("mscale", r.mscale != d.mscale, t == "yarn");
  check("mscale_all_dim", r.mscale_all_dim != d.mscale_all_dim, t == "yarn");
  check("truncate", r.truncate != d.truncate, t == "yarn");
  return out;
}

}  // namespace lct
