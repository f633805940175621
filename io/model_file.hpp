// The model file (format in docs/files.md, "Model file"): the config as root attributes with Hugging
// Face names, float32 weights as root datasets with Hugging Face names and [out, in] shapes.
#pragma once
#include <string>

#include "common/provenance.hpp"
#include "data/dataset.hpp"
#include "model/config.hpp"
#include "model/params.hpp"
#include "sys/memory.hpp"

namespace lct {

constexpr int64_t kModelFormatVersion = 1;

struct ModelData {
  ModelConfig config;
  ParamLayout layout;
  Buffer<float> params;  // [layout.total]
  // A checkpoint's /tokenizer group (what it was trained with), or a model file's from
  // convert --from-hf when the directory had one; no name for a model file from init.
  TokenizerInfo tokenizer;
};

// `tokenizer` (convert --from-hf: the one beside the weights) is recorded as a checkpoint's is.
void write_model_file(const std::string& path, const ModelConfig& config, const ParamLayout& layout,
                      const float* params, const Provenance& prov, bool force,
                      const TokenizerInfo* tokenizer = nullptr);

// Validates kind, format_version, config, every tensor's presence, dtype and shape, the
// data checksums, and that every weight is finite. A checkpoint is accepted wherever a model
// file is.
ModelData read_model_file(const std::string& path);
// Its config alone, checked as read_model_file checks the file's kind (no tensor is read).
ModelConfig read_model_file_config(const std::string& path);

}  // namespace lct
