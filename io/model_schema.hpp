// Private to io/: the model-file schema, shared by model files and checkpoints.
#pragma once
#include "io/h5.hpp"
#include "io/model_file.hpp"

namespace lct {

// Config attributes and one dataset per tensor at `loc` (the root for model files).
void write_model_contents(const h5::File& f, hid_t loc, const std::string& prefix,
                          const ModelConfig& config, const ParamLayout& layout, const float* params);
ModelConfig read_model_config(const h5::File& f);
// Reads every tensor of `layout` from "prefix + name" into out, checking dtype and shape.
void read_tensors(const h5::File& f, const std::string& prefix, const ModelConfig& config,
                  const ParamLayout& layout, float* out);

}  // namespace lct
