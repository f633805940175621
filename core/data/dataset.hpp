// A tokenised corpus in memory: what a dataset file holds.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lct {

// Where the answer of a synthetic passkey document lies; empty for other datasets.
struct PasskeyAnswers {
  std::vector<int64_t> answer_offset;  // [docs] first answer token, relative to the doc start
  std::vector<int32_t> answer_length;  // [docs] answer tokens (the key's digits)
  std::vector<double> depth;           // [docs] where the key sits: 0 = start, 1 = end
  bool empty() const { return answer_offset.empty(); }
};

// Which tokenizer made a dataset's ids: what the dataset file and checkpoints record.
struct TokenizerInfo {
  std::string name;        // "byte" or "sentencepiece"; "" = not recorded (older files)
  std::string type;        // sentencepiece: the model's type, "bpe" or "unigram"; "" for byte
  int64_t vocab_size = 0;
  int32_t bos_id = -1, eos_id = -1, pad_id = -1;
  std::string model;       // sentencepiece: the serialized ModelProto (a .model file's bytes)
  // FNV-1a of the name and model bytes, 16 hex digits: equal fingerprints, equal tokenizers.
  std::string fingerprint() const;
  bool same(const TokenizerInfo& o) const {
    return name == o.name && vocab_size == o.vocab_size && fingerprint() == o.fingerprint();
  }
  std::string describe() const;  // "sentencepiece (bpe), vocab_size 1000, fingerprint ..."
};

struct TokenDataset {
  std::vector<int32_t> tokens;       // [n_tokens] all documents back to back
  std::vector<int64_t> doc_offsets;  // [n_docs + 1] doc d is tokens[offsets[d], offsets[d+1])
  int64_t vocab_size = 0;
  std::string tokenizer;             // "byte" or "sentencepiece"
  std::string tokenizer_type;        // sentencepiece: "bpe" or "unigram"
  std::string tokenizer_model;       // sentencepiece: serialized ModelProto; "" for byte
  int32_t bos_id = -1, eos_id = -1, pad_id = -1;
  std::string source;                // what it was made from, for people
  PasskeyAnswers passkey;

  int64_t num_docs() const { return int64_t(doc_offsets.size()) - 1; }
  int64_t doc_length(int64_t d) const { return doc_offsets[d + 1] - doc_offsets[d]; }
};

// What a checkpoint remembers of the data it was trained on, so that a resume on other data
// is noticed: sizes, a fingerprint of the offsets and of up to 2^20 evenly spaced tokens
// (FNV-1a, 16 hex digits; cheap at any size yet different for two passkey sets of one
// shape), and the dataset's own `source` line.
struct DataIdentity {
  int64_t documents = 0, tokens = 0;
  std::string fingerprint;  // "" when unknown (a checkpoint from before identities)
  std::string source;
  bool same_data(const DataIdentity& o) const {
    return documents == o.documents && tokens == o.tokens && fingerprint == o.fingerprint;
  }
  std::string describe() const;  // "1024 documents, 524288 tokens, fingerprint ..., from '...'"
};
DataIdentity identify(const TokenDataset& ds);
TokenizerInfo tokenizer_info(const TokenDataset& ds);

// Throws unless `data_tok` (of dataset `data`) is the tokenizer `model` (a checkpoint) was
// trained with; `model_tok` with no name (a model file from init or convert, an older
// checkpoint) records none and matches any.
void check_same_tokenizer(const TokenizerInfo& model_tok, const std::string& model,
                          const TokenizerInfo& data_tok, const std::string& data);

// Checks offsets are monotone and cover the tokens, ids are in [0, vocab), passkey arrays
// match the document count; throws lct::Error naming `where` otherwise.
void validate(const TokenDataset& ds, const std::string& where);

// Throws unless every id of `ds` (read from `data`) fits a model of `model_vocab` ids.
void check_fits_model(const TokenDataset& ds, const std::string& data, int64_t model_vocab,
                      const std::string& model);

}  // namespace lct
