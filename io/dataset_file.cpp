#include "io/dataset_file.hpp"

#include "common/error.hpp"
#include "io/atomic.hpp"
#include "io/h5.hpp"
#include "io/tokenizer_group.hpp"

namespace lct {

void write_dataset_file(const std::string& path, const TokenDataset& ds, const Provenance& prov,
                        bool force) {
  validate(ds, cat("dataset for '", path, "'"));
  AtomicTarget target(path, force, "dataset file");
  {
    h5::File f = h5::File::create(
        target, 4.0 * double(ds.tokens.size()) + 8.0 * double(ds.doc_offsets.size() + 3 * ds.num_docs()),
        "dataset file");
    h5::write_kind(f, "dataset", kDatasetFormatVersion);
    h5::write_attr(f.h, "vocab_size", ds.vocab_size);
    h5::write_attr(f.h, "tokenizer", ds.tokenizer);
    h5::write_attr(f.h, "bos_token_id", int64_t(ds.bos_id));
    h5::write_attr(f.h, "eos_token_id", int64_t(ds.eos_id));
    h5::write_attr(f.h, "pad_token_id", int64_t(ds.pad_id));
    h5::write_attr(f.h, "n_documents", ds.num_docs());
    h5::write_attr(f.h, "n_tokens", int64_t(ds.tokens.size()));
    h5::write_attr(f.h, "source", ds.source);
    h5::write_array(f, f.h, "tokens", ds.tokens.data(), {int64_t(ds.tokens.size())});
    h5::write_array(f, f.h, "doc_offsets", ds.doc_offsets.data(), {int64_t(ds.doc_offsets.size())});
    if (!ds.passkey.empty()) {
      h5::create_group(f, f.h, "passkey");
      const int64_t n = ds.num_docs();
      h5::write_array(f, f.h, "passkey/answer_offset", ds.passkey.answer_offset.data(), {n});
      h5::write_array(f, f.h, "passkey/answer_length", ds.passkey.answer_length.data(), {n});
      h5::write_array(f, f.h, "passkey/depth", ds.passkey.depth.data(), {n});
    }
    // A sentencepiece dataset carries its model, so that the file alone decodes its ids.
    if (!ds.tokenizer_model.empty()) write_tokenizer_group(f, tokenizer_info(ds));
    h5::write_provenance(f, prov);
    f.close();
  }
  target.commit();
}

namespace {

// A 1-D array of the given class, with `expected` entries when that is >= 0.
int64_t check_1d(const h5::File& f, hid_t loc, const std::string& name, H5T_class_t cls,
                 int64_t expected) {
  const h5::ArrayInfo info = h5::array_info(f, loc, name);
  if (info.type_class != cls)
    fail("dataset file ", h5::where(f, name), ": dtype is ", info.dtype, " but must be ",
         cls == H5T_INTEGER ? "an integer type" : "a float type");
  if (info.shape.size() != 1)
    fail("dataset file ", h5::where(f, name), ": shape is ", h5::shape_str(info.shape),
         " but must be one-dimensional");
  if (expected >= 0 && info.shape[0] != expected)
    fail("dataset file ", h5::where(f, name), ": has ", info.shape[0], " entries but ", expected,
         " were expected");
  return info.shape[0];
}

}  // namespace

TokenDataset read_dataset_file(const std::string& path) {
  h5::File f = h5::File::open_read(path, "dataset file");
  h5::check_kind(f, "dataset file", {"dataset"}, kDatasetFormatVersion);
  const std::string w = h5::where(f, "");
  TokenDataset ds;
  ds.vocab_size = h5::read_int(f.h, "vocab_size", w);
  ds.tokenizer = h5::read_string(f.h, "tokenizer", w);
  ds.bos_id = int32_t(h5::read_int(f.h, "bos_token_id", w));
  ds.eos_id = int32_t(h5::read_int(f.h, "eos_token_id", w));
  ds.pad_id = int32_t(h5::read_int(f.h, "pad_token_id", w));
  if (h5::has_attr(f.h, "source")) ds.source = h5::read_string(f.h, "source", w);
  if (ds.tokenizer != "byte") {  // older files and byte datasets have no /tokenizer group
    const TokenizerInfo t = read_tokenizer_group(f);
    if (t.name.empty())
      fail("dataset file ", w, " declares tokenizer '", ds.tokenizer, "' but holds no /tokenizer ",
           "group with its model; prepare it again");
    const TokenizerInfo declared = tokenizer_info(ds);
    if (t.name != declared.name || t.vocab_size != declared.vocab_size || t.bos_id != declared.bos_id ||
        t.eos_id != declared.eos_id || t.pad_id != declared.pad_id)
      fail("dataset file ", w, ": the root attributes (", declared.name, ", vocab_size ",
           declared.vocab_size, ", bos ", declared.bos_id, ", eos ", declared.eos_id, ", pad ",
           declared.pad_id, ") disagree with /tokenizer (", t.name, ", ", t.vocab_size, ", ", t.bos_id,
           ", ", t.eos_id, ", ", t.pad_id, "); the file is damaged or was edited: prepare it again");
    ds.tokenizer_type = t.type;
    ds.tokenizer_model = t.model;
  }

  // Integer ids of any width are accepted; out-of-range values fail the vocabulary check.
  const int64_t n_tokens = check_1d(f, f.h, "tokens", H5T_INTEGER, -1);
  const int64_t n_offsets = check_1d(f, f.h, "doc_offsets", H5T_INTEGER, -1);
  if (n_tokens == 0 || n_offsets < 2)
    fail("dataset file ", w, " holds no documents; prepare it from non-empty input");
  ds.tokens.resize(size_t(n_tokens));
  ds.doc_offsets.resize(size_t(n_offsets));
  h5::read_array(f, f.h, "tokens", ds.tokens.data());
  h5::read_array(f, f.h, "doc_offsets", ds.doc_offsets.data());

  if (h5::exists(f.h, "passkey")) {
    const int64_t n = n_offsets - 1;
    check_1d(f, f.h, "passkey/answer_offset", H5T_INTEGER, n);
    check_1d(f, f.h, "passkey/answer_length", H5T_INTEGER, n);
    check_1d(f, f.h, "passkey/depth", H5T_FLOAT, n);
    auto& pk = ds.passkey;
    pk.answer_offset.resize(size_t(n));
    pk.answer_length.resize(size_t(n));
    pk.depth.resize(size_t(n));
    h5::read_array(f, f.h, "passkey/answer_offset", pk.answer_offset.data());
    h5::read_array(f, f.h, "passkey/answer_length", pk.answer_length.data());
    h5::read_array(f, f.h, "passkey/depth", pk.depth.data());
  }
  validate(ds, cat("dataset file ", w));
  return ds;
}

}  // namespace lct
