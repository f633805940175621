// A Hugging Face Llama checkpoint directory: config.json (LlamaConfig) and the weights in
// model.safetensors, or sharded (model.safetensors.index.json naming the shard of every
// tensor). The config maps onto ModelConfig field by field through
// ModelConfig::for_each_field; the tensor names are the same on both sides.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/provenance.hpp"
#include "io/model_file.hpp"

namespace lct {

struct HfReadInfo {
  std::vector<std::string> files;         // the safetensors files read
  std::map<std::string, int64_t> dtypes;  // dtype -> tensors converted from it
  int64_t ignored = 0;                    // tensors skipped (rotary inv_freq, tied lm_head)
};

// Reads and checks everything (config, every tensor's presence, shape, dtype, byte range,
// finiteness); throws lct::Error naming the file and tensor and the fix. Holds one fp32 copy
// of the model, filled one tensor at a time.
// The tokenizer files beside them, when there are (io/hf_tokenizer.hpp), in ModelData::tokenizer.
ModelData read_hf_model(const std::string& dir, HfReadInfo* info = nullptr);

// Writes DIR/config.json and DIR/model.safetensors (fp32, or bf16 rounded to nearest even),
// creating DIR when its parent exists. Both files are written under temporary names and
// renamed only when both are complete; existing ones are replaced only with `force`.
// "nlohmann-json 3.11.2": the JSON library, for --version.
std::string json_library_version();

// `tokenizer` (a checkpoint's; none recorded for a model file from init) goes beside them
// as Hugging Face's tokenizer files (io/hf_tokenizer.hpp), its ids into config.json.
void write_hf_model(const std::string& dir, const ModelConfig& config, const ParamLayout& layout,
                    const float* params, bool bf16, const TokenizerInfo& tokenizer, const Provenance& prov,
                    bool force);

}  // namespace lct
