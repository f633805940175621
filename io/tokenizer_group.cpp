#include "io/tokenizer_group.hpp"

#include <fstream>
#include <memory>

#include "common/error.hpp"
#include "data/tokenizer.hpp"

namespace lct {

void write_tokenizer_group(const h5::File& f, const TokenizerInfo& t) {
  h5::Handle g = h5::create_group(f, f.h, "tokenizer");
  h5::write_attr(g, "name", t.name);
  h5::write_attr(g, "type", t.type);
  h5::write_attr(g, "vocab_size", t.vocab_size);
  h5::write_attr(g, "bos_token_id", int64_t(t.bos_id));
  h5::write_attr(g, "eos_token_id", int64_t(t.eos_id));
  h5::write_attr(g, "pad_token_id", int64_t(t.pad_id));
  h5::write_attr(g, "fingerprint", t.fingerprint());
  if (!t.model.empty())
    h5::write_array(f, g, "model", reinterpret_cast<const uint8_t*>(t.model.data()),
                    {int64_t(t.model.size())});
}

TokenizerInfo read_tokenizer_group(const h5::File& f) {
  TokenizerInfo t;
  if (!h5::exists(f.h, "tokenizer")) return t;
  h5::Handle g = h5::open_group(f, "tokenizer");
  const std::string w = h5::where(f, "tokenizer");
  t.name = h5::read_string(g, "name", w);
  t.type = h5::read_string(g, "type", w);
  t.vocab_size = h5::read_int(g, "vocab_size", w);
  t.bos_id = int32_t(h5::read_int(g, "bos_token_id", w));
  t.eos_id = int32_t(h5::read_int(g, "eos_token_id", w));
  t.pad_id = int32_t(h5::read_int(g, "pad_token_id", w));
  if (h5::exists(g, "model")) {
    const h5::ArrayInfo info = h5::array_info(f, g, "model");
    if (info.type_class != H5T_INTEGER || info.type_size != 1 || info.shape.size() != 1)
      fail(h5::where(f, "tokenizer/model"), ": dtype ", info.dtype, ", shape ",
           h5::shape_str(info.shape), "; must be uint8 [bytes] (a .model file's bytes)");
    t.model.resize(size_t(info.shape[0]));
    h5::read_array(f, g, "model", reinterpret_cast<uint8_t*>(t.model.data()));
  }
  // The stored model must load and declare what the attributes say.
  const std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(t, w);
  const TokenizerInfo& loaded = tokenizer->info();
  if (loaded.vocab_size != t.vocab_size || loaded.bos_id != t.bos_id || loaded.eos_id != t.eos_id ||
      loaded.pad_id != t.pad_id || loaded.type != t.type)
    fail(w, ": the attributes (", t.type, ", vocab_size ", t.vocab_size, ", bos ", t.bos_id, ", eos ",
         t.eos_id, ", pad ", t.pad_id, ") disagree with the stored model (", loaded.type, ", ",
         loaded.vocab_size, ", ", loaded.bos_id, ", ", loaded.eos_id, ", ", loaded.pad_id,
         "); the file is damaged or was edited: prepare it again");
  if (h5::has_attr(g, "fingerprint") && h5::read_string(g, "fingerprint", w) != t.fingerprint())
    fail(w, ": the stored model's fingerprint is ", t.fingerprint(), " but the file records ",
         h5::read_string(g, "fingerprint", w), "; the file is damaged: prepare it again");
  return t;
}

std::optional<TokenizerInfo> read_file_tokenizer(const std::string& path) {
  // HDF5's signature at the file's start (lctrain writes no user block).
  char head[8] = {};
  std::ifstream in(path, std::ios::binary);
  if (!in.read(head, sizeof head) || std::string(head, sizeof head) != "\x89HDF\r\n\x1a\n") return std::nullopt;
  const h5::File f = h5::File::open_read(path, "file");
  return read_tokenizer_group(f);
}

}  // namespace lct
