#include "data/dataset.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/knobs.hpp"
#include "common/error.hpp"

namespace lct {

void TokenSource::read_points(const std::vector<int64_t>& at, int32_t* out) {
  for (size_t i = 0; i < at.size(); ++i) read_tokens(at[i], 1, &out[i]);
}

MemorySource::MemorySource(const TokenDataset& ds) : ds_(ds) {
  info_ = ds;  // the DatasetInfo part
  has_weights_ = !ds.loss_weights.empty();
}

void MemorySource::read_tokens(int64_t begin, int64_t n, int32_t* out) {
  std::copy(ds_.tokens.begin() + begin, ds_.tokens.begin() + begin + n, out);
}

void MemorySource::read_weights(int64_t begin, int64_t n, float* out) {
  std::copy(ds_.loss_weights.begin() + begin, ds_.loss_weights.begin() + begin + n, out);
}

namespace {
struct Fnv1a {
  uint64_t h = 1469598103934665603ull;
  template <class T>
  void add(T v) {
    const auto* b = reinterpret_cast<const unsigned char*>(&v);
    for (size_t i = 0; i < sizeof v; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
};
}  // namespace

DataIdentity identify(TokenSource& data) {
  const DatasetInfo& info = data.info();
  Fnv1a f;
  for (int64_t o : info.doc_offsets) f.add(o);
  const size_t n = size_t(info.num_tokens()), samples = std::min<size_t>(n, size_t(1) << 20);
  std::vector<int64_t> at(samples);
  for (size_t i = 0; i < samples; ++i) at[i] = int64_t(i * n / samples);
  std::vector<int32_t> tokens(samples);
  data.read_points(at, tokens.data());
  for (int32_t t : tokens) f.add(t);  // int32, as when the tokens were held whole
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(f.h));
  return {info.num_docs(), int64_t(n), hex, info.source};
}

LossWeightCount count_loss_weights(TokenSource& data) {
  const DatasetInfo& info = data.info();
  const std::vector<int64_t>& off = info.doc_offsets;
  LossWeightCount c;
  // Pieces of 2^20 weights across document boundaries: one read per piece, however short the
  // documents (a read per document cost one HDF5 call each: millions for a large corpus).
  std::vector<float> w;
  int64_t d = 0;
  bool doc_weighted = false;
  auto close_documents_before = [&](int64_t i) {
    for (; d < info.num_docs() && i >= off[size_t(d) + 1]; ++d, doc_weighted = false) c.documents_without += !doc_weighted;
  };
  for (int64_t a = 0; a < info.num_tokens(); a += int64_t(w.size())) {
    w.resize(size_t(std::min<int64_t>(int64_t(1) << 20, info.num_tokens() - a)));
    data.read_weights(a, int64_t(w.size()), w.data());
    for (int64_t i = a; i < a + int64_t(w.size()); ++i) {
      close_documents_before(i);
      if (i == off[size_t(d)]) continue;  // a document's first token is no target
      const float x = w[size_t(i - a)];
      c.sum += x;
      c.weighted += x > 0;
      doc_weighted = doc_weighted || x > 0;
      ++c.targets;
    }
  }
  close_documents_before(info.num_tokens());
  return c;
}

DataIdentity identify(const TokenDataset& ds) {
  MemorySource s(ds);
  return identify(s);
}

TokenizerInfo tokenizer_info(const DatasetInfo& ds) {
  TokenizerInfo t;
  t.name = ds.tokenizer;
  t.type = ds.tokenizer_type;
  t.vocab_size = ds.vocab_size;
  t.bos_id = ds.bos_id;
  t.eos_id = ds.eos_id;
  t.pad_id = ds.pad_id;
  t.model = ds.tokenizer_model;
  return t;
}

std::string TokenizerInfo::fingerprint() const {
  Fnv1a f;
  for (char c : name) f.add(c);
  f.add('\0');
  for (char c : model) f.add(c);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(f.h));
  return hex;
}

std::string TokenizerInfo::describe() const {
  return cat(name, type.empty() ? "" : " (" + type + ")", ", vocab_size ", vocab_size,
             ", fingerprint ", fingerprint());
}

void check_same_tokenizer(const TokenizerInfo& model_tok, const std::string& model,
                          const TokenizerInfo& data_tok, const std::string& data) {
  if (model_tok.name.empty() || model_tok.same(data_tok)) return;
  fail("'", model, "' was trained with the tokenizer ", model_tok.describe(), " but dataset '", data,
       "' was made with ", data_tok.describe(), ": its ids mean other text; prepare the data with ",
       "the model's tokenizer (prepare ", knob_name(Knob::TokenizerModel), " with its /tokenizer/model bytes)");
}

std::string DataIdentity::describe() const {
  return cat(documents, " documents, ", tokens, " tokens, fingerprint ", fingerprint, ", from '",
             source, "'");
}

void validate_info(const DatasetInfo& ds, int64_t n_tokens, const std::string& where) {
  const auto& off = ds.doc_offsets;
  if (off.empty() || off.front() != 0 || off.back() != n_tokens)
    fail(where, ": doc_offsets must start at 0 and end at the token count ", n_tokens,
         "; the file is damaged or was not written by lctrain prepare");
  for (size_t d = 1; d < off.size(); ++d)
    if (off[d] < off[d - 1])
      fail(where, ": doc_offsets decrease at document ", d - 1, " (", off[d - 1], " > ", off[d],
           "); offsets must be non-decreasing");
  if (ds.vocab_size <= 0) fail(where, ": vocab_size is ", ds.vocab_size, ", must be positive");
  const auto& pk = ds.passkey;
  if (!pk.empty()) {
    const size_t n = size_t(ds.num_docs());
    if (pk.answer_offset.size() != n || pk.answer_length.size() != n || pk.depth.size() != n)
      fail(where, ": passkey arrays have ", pk.answer_offset.size(), "/", pk.answer_length.size(),
           "/", pk.depth.size(), " entries for ", n, " documents");
    for (size_t d = 0; d < n; ++d)
      if (pk.answer_offset[d] < 1 || pk.answer_length[d] < 1 ||
          pk.answer_offset[d] + pk.answer_length[d] > ds.doc_length(int64_t(d)))
        fail(where, ": passkey answer of document ", d, " lies outside the document");
  }
}

void check_ids(const int32_t* tokens, int64_t n, int64_t first, int64_t vocab, const std::string& where) {
  for (int64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      fail(where, ": token id ", tokens[i], " at position ", first + i, " is outside the vocabulary [0, ",
           vocab, "); re-create the dataset with the tokenizer it declares");
}

void validate(const TokenDataset& ds, const std::string& where) {
  validate_info(ds, int64_t(ds.tokens.size()), where);
  check_ids(ds.tokens.data(), int64_t(ds.tokens.size()), 0, ds.vocab_size, where);
  const auto& w = ds.loss_weights;
  if (!w.empty() && w.size() != ds.tokens.size())
    fail(where, ": loss_weights has ", w.size(), " entries for ", ds.tokens.size(),
         " tokens; it must have one per token");
  for (size_t i = 0; i < w.size(); ++i)
    if (!std::isfinite(w[i]) || w[i] < 0)
      fail(where, ": loss weight ", w[i], " at position ", i, " must be finite and non-negative");
}

void check_fits_model(const DatasetInfo& ds, const std::string& data, int64_t model_vocab,
                      const std::string& model) {
  if (ds.vocab_size > model_vocab)
    fail("dataset '", data, "' uses a vocabulary of ", ds.vocab_size, " ids but model '", model,
         "' has vocab_size ", model_vocab, "; prepare the data with the model's tokenizer or ",
         "init a model with ", knob_name(Knob::VocabSize), " ", ds.vocab_size);
}

}  // namespace lct
