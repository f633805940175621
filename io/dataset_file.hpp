// The dataset file (format in docs/files.md, "Dataset file"): token ids in /tokens, document
// boundaries in /doc_offsets, optional per-token loss weights in /loss_weights, tokenizer
// description as root attributes (a sentencepiece dataset also has /tokenizer, its model),
// and for synthetic passkey data the answer positions in /passkey.
#pragma once
#include <memory>
#include <string>

#include "common/provenance.hpp"
#include "data/dataset.hpp"

namespace lct {

// 2: tokens in the smallest unsigned type that holds vocab_size, chunked and compressed.
// 1: int32 tokens, uncompressed; still read.
constexpr int64_t kDatasetFormatVersion = 2;

// Tokens (and loss weights) per chunk; see dataset_file.cpp for why.
constexpr int64_t kDatasetChunkTokens = int64_t(1) << 15;
// A reader's HDF5 chunk cache per array: 64 to 256 chunks (by token width), so that chunks
// shared by neighbouring reads, and the fingerprint's samples, are decompressed once.
constexpr size_t kDatasetCacheBytes = size_t(8) << 20;

// Bytes per stored id for a vocabulary of `vocab` ids: 1, 2 or 4.
int64_t dataset_id_bytes(int64_t vocab);

void write_dataset_file(const std::string& path, const TokenDataset& ds, const Provenance& prov,
                        bool force);

// Writes a dataset file as it is made, documents appended in order, so that the writer holds
// only the documents it is given and the offsets (8 bytes per document). The file appears
// at `path` only when finish() succeeds (io/atomic: never a half-written file over a good
// one); otherwise the temporary file is removed.
class DatasetWriter {
 public:
  enum class Weights { None, Mask, Float };  // /loss_weights: none, uint8 0/1, float32
  // `tokenizer` supplies vocab_size, tokenizer (type and model) and the special ids; finish()
  // writes /tokenizer when there is a model. `reserve_bytes` of disk
  // are checked and reserved first (an estimate of the stored size; unused blocks are given
  // back at the end).
  DatasetWriter(const std::string& path, const DatasetInfo& tokenizer, bool force, double reserve_bytes,
                Weights weights = Weights::None);
  ~DatasetWriter();
  // Documents of `lengths[d]` tokens, back to back in tokens[sum of lengths]; their loss
  // weights alike when the file has weights (else null). Ids are checked against the vocabulary.
  void append(const int32_t* tokens, const float* weights, const std::vector<int64_t>& lengths);
  const std::vector<int64_t>& doc_offsets() const { return offsets_; }
  // The attributes, offsets, `passkey` answers (empty: none) and provenance; then the file
  // takes its name. Throws when no document was appended.
  void finish(const std::string& source, const PasskeyAnswers& passkey, const Provenance& prov);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  DatasetInfo header_;
  Weights weights_;
  std::vector<int64_t> offsets_{0};
};

// Opens a dataset file for reading on demand: attributes, offsets and passkey answers are
// read and validated now (kind, format_version, shapes, offsets); token ranges are read
// when asked for, each checked against the vocabulary, through a chunk cache of
// `cache_bytes` (per array). The file stays open while the source lives.
std::unique_ptr<TokenSource> open_dataset_file(const std::string& path,
                                               size_t cache_bytes = kDatasetCacheBytes);

// The whole file in memory (inspect, tests), validated as above and every token id checked.
TokenDataset read_dataset_file(const std::string& path);

}  // namespace lct
