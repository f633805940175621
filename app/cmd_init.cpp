// lctrain init: a new model file from a preset, with any size overridden explicitly.
#include <algorithm>
#include <iostream>

#include "app/context.hpp"
#include "common/error.hpp"
#include "io/model_file.hpp"
#include "model/init.hpp"
#include "sys/memory.hpp"

namespace lct {

namespace {

ModelConfig resolve_config(const InitOptions& o) {
  ModelConfig c = model_preset(o.preset);
  auto take = [](auto& field, auto value) {
    if (value > 0) field = value;
  };
  take(c.vocab_size, o.vocab_size);
  take(c.hidden_size, o.hidden_size);
  take(c.intermediate_size, o.intermediate_size);
  take(c.num_hidden_layers, o.num_hidden_layers);
  take(c.num_attention_heads, o.num_attention_heads);
  take(c.num_key_value_heads, o.num_key_value_heads);
  take(c.max_position_embeddings, o.max_position_embeddings);
  take(c.rope_theta, o.rope_theta);
  take(c.rms_norm_eps, o.rms_norm_eps);
  take(c.initializer_range, o.initializer_range);
  if (o.sliding_window >= 0) c.sliding_window = o.sliding_window;
  if (o.tie_word_embeddings != "preset") c.tie_word_embeddings = o.tie_word_embeddings == "true";
  RopeScaling& r = c.rope_scaling;
  r.rope_type = o.rope_scaling == "none" ? "" : o.rope_scaling;
  r.factor = o.rope_factor;
  r.original_max_position_embeddings = o.rope_original_max_position_embeddings;
  r.low_freq_factor = o.rope_low_freq_factor;
  r.high_freq_factor = o.rope_high_freq_factor;
  r.beta_fast = o.rope_beta_fast;
  r.beta_slow = o.rope_beta_slow;
  r.attention_factor = o.rope_attention_factor;
  r.mscale = o.rope_mscale;
  r.mscale_all_dim = o.rope_mscale_all_dim;
  r.truncate = o.rope_truncate;
  if (const auto unused = rope_scaling_unused(r); !unused.empty()) {
    std::string names;  // rope_scaling.beta_fast -> --rope-beta-fast (rope_scaling.beta_fast)
    for (const auto& n : unused) {
      std::string flag = n.substr(n.find('.') + 1);
      std::replace(flag.begin(), flag.end(), '_', '-');
      names += cat(names.empty() ? "" : ", ", flag == "truncate" ? "--[no-]rope-" : "--rope-", flag,
                   " (", n, ")");
    }
    const char* them = unused.size() > 1 ? "them" : "it";
    fail("init: ", names, " given but --rope-scaling ", o.rope_scaling, " does not use ", them,
         ": drop ", them, " or choose a --rope-scaling that reads ", them);
  }
  c.validate(cat("init (preset '", o.preset, "' with the sizes given)"));
  return c;
}

}  // namespace

int cmd_init(Context& ctx) {
  ctx.print_startup("init", true);
  if (!ctx.world.root()) return kExitOk;  // one writer
  const InitOptions& o = ctx.inv.init;
  const ModelConfig config = resolve_config(o);
  const ParamLayout layout = ParamLayout::llama(config);
  Buffer<float> params(layout.total);
  llama_init(layout, config, uint64_t(o.seed), params.data());
  write_model_file(o.out, config, layout, params.data(), ctx.provenance(), o.force);
  ctx.out() << "wrote " << o.out << ": " << layout.num_parameters() << " parameters ("
            << config.num_hidden_layers << " layers, hidden " << config.hidden_size << ", heads "
            << config.num_attention_heads << "/" << config.num_key_value_heads << ", head_dim "
            << config.head_dim() << ")" << std::endl;
  return kExitOk;
}

}  // namespace lct
