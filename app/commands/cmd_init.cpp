// lctrain init: a new model file from a preset, with any size overridden explicitly.
#include <iostream>

#include "app/cli/context.hpp"
#include "app/cli/rope_options.hpp"
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
  take(c.rms_norm_eps, o.rms_norm_eps);
  take(c.initializer_range, o.initializer_range);
  if (o.sliding_window >= 0) c.sliding_window = o.sliding_window;
  if (o.tie_word_embeddings) c.tie_word_embeddings = *o.tie_word_embeddings;
  apply_rope_options(o.rope, c, "init");
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
