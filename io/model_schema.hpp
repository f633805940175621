// Private to io/: the model-file schema, shared by model files and checkpoints.
#pragma once
#include <vector>

#include "common/finite.hpp"
#include "io/h5.hpp"
#include "io/model_file.hpp"

namespace lct {

// Config attributes and one dataset per tensor at `loc` (the root for model files).
void write_model_contents(const h5::File& f, hid_t loc, const std::string& prefix,
                          const ModelConfig& config, const ParamLayout& layout, const float* params);
// Just the config attributes (model_type and the LlamaConfig fields).
void write_model_config(const h5::File& f, const ModelConfig& config);
ModelConfig read_model_config(const h5::File& f);
// Throws unless dataset `name` is float32 of t's shape (naming the config that needs it).
void check_tensor(const h5::File& f, const std::string& name, const TensorSpec& t,
                  const ModelConfig& config);
// Reads every tensor of `layout` from "prefix + name" into out, checking dtype and shape.
void read_tensors(const h5::File& f, const std::string& prefix, const ModelConfig& config,
                  const ParamLayout& layout, float* out);
// Throws naming the first tensor of `layout` ("prefix + name") in `values` that holds NaN or
// infinite values, with how many: a model holding any trains into skipped steps only and
// evaluates to NaN. Model files are checked on reading; checkpoints may call it as well.
void check_finite_tensors(const h5::File& f, const std::string& prefix, const ParamLayout& layout,
                          const float* values);
// The same from counts per tensor of `layout` (of what this rank read of each: a checkpoint
// read in parts).
void check_finite_counts(const h5::File& f, const std::string& prefix, const ParamLayout& layout,
                         const std::vector<NonFinite>& counts);

}  // namespace lct
