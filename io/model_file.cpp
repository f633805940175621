#include "io/model_file.hpp"

#include "common/error.hpp"
#include "common/finite.hpp"
#include "io/atomic.hpp"
#include "io/model_schema.hpp"
#include "io/tokenizer_group.hpp"

namespace lct {

void write_model_config(const h5::File& f, const ModelConfig& config) {
  h5::write_attr(f.h, "model_type", std::string("llama"));
  for (const auto& [name, v] : config.values()) h5::write_attr(f.h, name, v);
}

void write_model_contents(const h5::File& f, hid_t loc, const std::string& prefix,
                          const ModelConfig& config, const ParamLayout& layout, const float* params) {
  write_model_config(f, config);
  for (const TensorSpec& t : layout.tensors)
    h5::write_array(f, loc, prefix + t.name, params + t.offset, t.shape);
}

ModelConfig read_model_config(const h5::File& f) {
  const std::string w = h5::where(f, "");
  ModelConfig c;
  ModelConfig::for_each_field(c, [&](const char* name, auto& v) {
    using T = std::decay_t<decltype(v)>;
    if (ModelConfig::optional_field(name) && !h5::has_attr(f.h, name)) return;
    if constexpr (std::is_same_v<T, int64_t>) v = h5::read_int(f.h, name, w);
    if constexpr (std::is_same_v<T, double>) v = h5::read_double(f.h, name, w);
    if constexpr (std::is_same_v<T, bool>) v = h5::read_bool(f.h, name, w);
    if constexpr (std::is_same_v<T, std::string>) v = h5::read_string(f.h, name, w);
  });
  c.validate(cat("model file ", w));
  if (c.tie_word_embeddings && h5::exists(f.h, "lm_head.weight"))
    fail("model file ", w, " has 'lm_head.weight' but tie_word_embeddings is true; ",
         "remove the tensor or set tie_word_embeddings to false");
  return c;
}

void check_tensor(const h5::File& f, const std::string& name, const TensorSpec& t,
                  const ModelConfig& config) {
  const h5::ArrayInfo info = h5::array_info(f, f.h, name);
  if (info.type_class != H5T_FLOAT || info.type_size != 4)
    fail("model file ", h5::where(f, name), ": dtype is ", info.dtype,
         " but weights must be float32");
  if (info.shape != t.shape)
    fail("model file ", h5::where(f, name), ": shape is ", h5::shape_str(info.shape),
         " but the config (hidden_size ", config.hidden_size, ", intermediate_size ",
         config.intermediate_size, ", heads ", config.num_attention_heads, "/",
         config.num_key_value_heads, ", vocab_size ", config.vocab_size, ") needs ",
         h5::shape_str(t.shape));
}

void read_tensors(const h5::File& f, const std::string& prefix, const ModelConfig& config,
                  const ParamLayout& layout, float* out) {
  for (const TensorSpec& t : layout.tensors) {
    const std::string name = prefix + t.name;
    check_tensor(f, name, t, config);
    h5::read_array(f, f.h, name, out + t.offset);
  }
}

void check_finite_counts(const h5::File& f, const std::string& prefix, const ParamLayout& layout,
                         const std::vector<NonFinite>& counts) {
  const TensorSpec* first = nullptr;
  NonFinite bad;
  size_t other_tensors = 0;
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const NonFinite& c = counts.at(i);
    if (c.total() == 0) continue;
    if (first) {
      ++other_tensors;
      continue;
    }
    first = &layout.tensors[i];
    bad = c;
  }
  if (!first) return;
  const std::string others =
      other_tensors == 0 ? "" : cat(" (", other_tensors, " more tensor", other_tensors > 1 ? "s hold" : " holds", " some too)");
  fail("'", f.path, "': tensor '", prefix + first->name, "' holds ", describe(bad), " among its ",
       first->numel, others, "; training from it would skip every step and eval would give NaN: ",
       "re-create the model (lctrain init) or use an earlier checkpoint");
}

void check_finite_tensors(const h5::File& f, const std::string& prefix, const ParamLayout& layout,
                          const float* values) {
  std::vector<NonFinite> counts;
  for (const TensorSpec& t : layout.tensors) counts.push_back(count_non_finite(values + t.offset, t.numel));
  check_finite_counts(f, prefix, layout, counts);
}

void write_model_file(const std::string& path, const ModelConfig& config, const ParamLayout& layout,
                      const float* params, const Provenance& prov, bool force, const TokenizerInfo* tokenizer) {
  AtomicTarget target(path, force, "model file");
  {
    h5::File f = h5::File::create(target, 4.0 * double(layout.total), "model file");
    h5::write_kind(f, "model", kModelFormatVersion);
    write_model_contents(f, f.h, "", config, layout, params);
    if (tokenizer && !tokenizer->name.empty()) write_tokenizer_group(f, *tokenizer);
    h5::write_provenance(f, prov);
    f.close();
  }
  target.commit();
}

ModelConfig read_model_file_config(const std::string& path) {
  h5::File f = h5::File::open_read(path, "model file");
  h5::check_kind(f, "model file", {"model", "checkpoint"}, kModelFormatVersion);
  return read_model_config(f);
}

ModelData read_model_file(const std::string& path) {
  h5::File f = h5::File::open_read(path, "model file");
  h5::check_kind(f, "model file", {"model", "checkpoint"}, kModelFormatVersion);
  ModelData m;
  m.config = read_model_config(f);
  m.layout = ParamLayout::llama(m.config);
  m.params = Buffer<float>(m.layout.total);
  read_tensors(f, "", m.config, m.layout, m.params.data());
  check_finite_tensors(f, "", m.layout, m.params.data());
  m.tokenizer = read_tokenizer_group(f);
  return m;
}

}  // namespace lct
