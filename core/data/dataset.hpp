// A tokenised corpus: what a dataset file holds. In memory whole (TokenDataset, what prepare
// builds), or opened for reading range by range (TokenSource, what train and eval use).
#pragma once
#include <cstdint>
#include <memory>
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

// Everything of a dataset but its per-token arrays: small (8 bytes per document, and the
// tokenizer's model when it is a SentencePiece one).
struct DatasetInfo {
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
  int64_t num_tokens() const { return doc_offsets.empty() ? 0 : doc_offsets.back(); }
};

struct TokenDataset : DatasetInfo {
  std::vector<int32_t> tokens;       // [n_tokens] all documents back to back
  // [n_tokens] or empty (every target weighs 1): the weight of token i when it is a target,
  // multiplying its cross-entropy term and counted in the step's normalisation.
  std::vector<float> loss_weights;
};

// Reads a dataset's tokens range by range, so that a rank holds only the sequences it trains
// on: memory does not grow with the dataset (its offsets aside). io/dataset_file.hpp opens a
// file as one (HDF5 hyperslab reads); MemorySource serves a TokenDataset held whole.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  const DatasetInfo& info() const { return info_; }
  bool has_weights() const { return has_weights_; }
  // tokens[begin, begin + n) into out[n]; throws when an id is outside [0, vocab_size).
  virtual void read_tokens(int64_t begin, int64_t n, int32_t* out) = 0;
  // loss_weights[begin, begin + n) into out[n]; only when has_weights().
  virtual void read_weights(int64_t begin, int64_t n, float* out) = 0;
  // tokens[at[i]] into out[i], `at` ascending (the fingerprint's samples). One token at a time
  // unless a source does better.
  virtual void read_points(const std::vector<int64_t>& at, int32_t* out);

 protected:
  DatasetInfo info_;
  bool has_weights_ = false;
};

// A view of `ds` (which must outlive it); its info is a copy of ds's.
class MemorySource : public TokenSource {
 public:
  explicit MemorySource(const TokenDataset& ds);
  void read_tokens(int64_t begin, int64_t n, int32_t* out) override;
  void read_weights(int64_t begin, int64_t n, float* out) override;

 private:
  const TokenDataset& ds_;
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
// The targets (every token but each document's first) that loss weights score: counted a
// document at a time, read in bounded pieces. Only meaningful when data.has_weights().
struct LossWeightCount {
  int64_t targets = 0, weighted = 0;  // weighted: weight > 0
  double sum = 0;
  int64_t documents_without = 0;      // documents none of whose targets is weighted
};
LossWeightCount count_loss_weights(TokenSource& data);

// Reads only the sampled tokens: the same value whichever way the data is held.
DataIdentity identify(TokenSource& data);
DataIdentity identify(const TokenDataset& ds);
TokenizerInfo tokenizer_info(const DatasetInfo& ds);

// Throws unless `data_tok` (of dataset `data`) is the tokenizer `model` (a checkpoint) was
// trained with; `model_tok` with no name (a model file from init or convert, an older
// checkpoint) records none and matches any.
void check_same_tokenizer(const TokenizerInfo& model_tok, const std::string& model,
                          const TokenizerInfo& data_tok, const std::string& data);

// Checks offsets are monotone and cover the tokens, ids are in [0, vocab), loss weights are
// finite, non-negative and one per token, passkey arrays match the document count; throws
// lct::Error naming `where` otherwise.
void validate(const TokenDataset& ds, const std::string& where);
// The same for what a TokenSource holds before any token is read: offsets (ending at
// `n_tokens`), vocabulary, passkey arrays.
void validate_info(const DatasetInfo& info, int64_t n_tokens, const std::string& where);
// Throws unless every id of tokens[0, n) (starting at `first` in the dataset) is in [0, vocab).
void check_ids(const int32_t* tokens, int64_t n, int64_t first, int64_t vocab, const std::string& where);

// Throws unless every id of `info` (read from `data`) fits a model of `model_vocab` ids.
void check_fits_model(const DatasetInfo& info, const std::string& data, int64_t model_vocab,
                      const std::string& model);

}  // namespace lct
