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

struct TokenDataset {
  std::vector<int32_t> tokens;       // [n_tokens] all documents back to back
  std::vector<int64_t> doc_offsets;  // [n_docs + 1] doc d is tokens[offsets[d], offsets[d+1])
  int64_t vocab_size = 0;
  std::string tokenizer;             // "byte"
  int32_t bos_id = -1, eos_id = -1, pad_id = -1;
  std::string source;                // what it was made from, for people
  PasskeyAnswers passkey;

  int64_t num_docs() const { return int64_t(doc_offsets.size()) - 1; }
  int64_t doc_length(int64_t d) const { return doc_offsets[d + 1] - doc_offsets[d]; }
};

// Checks offsets are monotone and cover the tokens, ids are in [0, vocab), passkey arrays
// match the document count; throws lct::Error naming `where` otherwise.
void validate(const TokenDataset& ds, const std::string& where);

// Throws unless every id of `ds` (read from `data`) fits a model of `model_vocab` ids.
void check_fits_model(const TokenDataset& ds, const std::string& data, int64_t model_vocab,
                      const std::string& model);

}  // namespace lct
