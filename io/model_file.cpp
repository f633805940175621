#include "io/model_file.hpp"

#include "common/error.hpp"
#include "io/atomic.hpp"
#include "io/h5.hpp"

namespace lct {

void write_model_file(const std::string& path, const ModelConfig& config, const ParamLayout& layout,
                      const float* params, const Provenance& prov, bool force) {
  AtomicTarget target(path, force, "model file");
  {
    h5::File f = h5::File::create(target.temp_path());
    h5::write_kind(f, "model", kModelFormatVersion);
    h5::write_attr(f.h, "model_type", std::string("llama"));
    ModelConfig::for_each_field(config, [&](const char* name, const auto& v) {
      h5::write_attr(f.h, name, Value(v));
    });
    for (const TensorSpec& t : layout.tensors)
      h5::write_array(f, f.h, t.name, params + t.offset, t.shape);
    h5::write_provenance(f, prov);
    f.close();
  }
  target.commit();
}

ModelData read_model_file(const std::string& path) {
  h5::File f = h5::File::open_read(path, "model file");
  h5::check_kind(f, "model file", {"model", "checkpoint"}, kModelFormatVersion);
  const std::string w = h5::where(f, "");

  ModelData m;
  ModelConfig::for_each_field(m.config, [&](const char* name, auto& v) {
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<T, int64_t>) v = h5::read_int(f.h, name, w);
    if constexpr (std::is_same_v<T, double>) v = h5::read_double(f.h, name, w);
    if constexpr (std::is_same_v<T, bool>) v = h5::read_bool(f.h, name, w);
  });
  m.config.validate(cat("model file ", w));
  m.layout = ParamLayout::llama(m.config);
  if (m.config.tie_word_embeddings && h5::exists(f.h, "lm_head.weight"))
    fail("model file ", w, " has 'lm_head.weight' but tie_word_embeddings is true; ",
         "remove the tensor or set tie_word_embeddings to false");

  m.params = Buffer<float>(m.layout.total);
  for (const TensorSpec& t : m.layout.tensors) {
    const h5::ArrayInfo info = h5::array_info(f, f.h, t.name);
    if (info.type_class != H5T_FLOAT || info.type_size != 4)
      fail("model file ", h5::where(f, t.name), ": dtype is ", info.dtype,
           " but weights must be float32");
    if (info.shape != t.shape)
      fail("model file ", h5::where(f, t.name), ": shape is ", h5::shape_str(info.shape),
           " but the config (hidden_size ", m.config.hidden_size, ", intermediate_size ",
           m.config.intermediate_size, ", heads ", m.config.num_attention_heads, "/",
           m.config.num_key_value_heads, ", vocab_size ", m.config.vocab_size, ") needs ",
           h5::shape_str(t.shape));
    h5::read_array(f, f.h, t.name, m.params.data() + t.offset);
  }
  return m;
}

}  // namespace lct
