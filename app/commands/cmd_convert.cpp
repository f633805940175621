// lctrain convert: a Hugging Face Llama directory (config.json + safetensors) to a model file,
// and back. The tensor names are the same on both sides and RoPE uses the same rotate_half
// layout, so tensors are copied (widened from BF16/F16, or rounded to bf16 on the way out).
#include <iostream>

#include "app/cli/context.hpp"
#include "common/error.hpp"
#include "io/atomic.hpp"
#include "io/hf_model.hpp"
#include "io/model_file.hpp"

namespace lct {

int cmd_convert(Context& ctx) {
  ctx.print_startup("convert", false);
  if (!ctx.world.root()) return kExitOk;  // one writer
  const ConvertOptions& o = ctx.inv.convert;
  if (!o.from_hf.empty()) {
    check_can_write(o.out, o.force, "model file");  // before reading gigabytes
    HfReadInfo info;
    const ModelData m = read_hf_model(o.from_hf, &info);
    write_model_file(o.out, m.config, m.layout, m.params.data(), ctx.provenance(), o.force, &m.tokenizer);
    std::string dtypes;
    for (const auto& [d, n] : info.dtypes) dtypes += cat(dtypes.empty() ? "" : ", ", n, " ", d);
    ctx.out() << "read " << o.from_hf << ": " << info.files.size() << " safetensors file"
              << (info.files.size() == 1 ? "" : "s") << ", " << m.layout.tensors.size() << " tensors ("
              << dtypes << ")" << (info.ignored ? cat(", ", info.ignored, " ignored (rotary inv_freq, tied lm_head)") : "")
              << "\nwrote " << o.out << ": " << m.layout.num_parameters() << " parameters ("
              << m.config.num_hidden_layers << " layers, hidden " << m.config.hidden_size << ", heads "
              << m.config.num_attention_heads << "/" << m.config.num_key_value_heads << ", head_dim "
              << m.config.head_dim() << ")\ntokenizer: "
              << (m.tokenizer.name.empty() ? "none read (no tokenizer.model, nor lctrain's byte tokenizer described)"
                                           : m.tokenizer.describe() + ", recorded in the model file")
              << std::endl;
    return kExitOk;
  }
  const ModelData m = read_model_file(o.model);
  const bool bf16 = o.dtype == Precision::Bf16;
  write_hf_model(o.to_hf, m.config, m.layout, m.params.data(), bf16, m.tokenizer, ctx.provenance(), o.force);
  ctx.out() << "wrote " << o.to_hf << "/config.json and " << o.to_hf << "/model.safetensors: "
            << m.layout.tensors.size() << " tensors, " << m.layout.num_parameters() << " parameters in "
            << (bf16 ? "BF16 (rounded to nearest even)" : "F32 (exact)") << "\n";
  if (m.tokenizer.name.empty())
    ctx.out() << "note: '" << o.model << "' records no tokenizer (a model file from init): no tokenizer files "
              << "written; convert a checkpoint, which records the tokenizer it was trained with" << std::endl;
  else
    ctx.out() << "tokenizer: " << m.tokenizer.describe() << "; wrote "
              << (m.tokenizer.model.empty() ? "" : "tokenizer.model, ") << "tokenizer_config.json and "
              << "generation_config.json, and bos/eos/pad ids " << m.tokenizer.bos_id << "/" << m.tokenizer.eos_id << "/"
              << m.tokenizer.pad_id << " in config.json" << std::endl;
  if (m.config.sliding_window > 0)
    ctx.out() << "note: config.json says sliding_window " << m.config.sliding_window
              << "; check that the Hugging Face code you load it with applies it (Mistral's does)"
              << std::endl;
  return kExitOk;
}

}  // namespace lct
