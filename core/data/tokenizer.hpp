// Tokenizers: text <-> token ids. Two kinds:
//   byte           ids 0..255 are the bytes of UTF-8 text, then BOS, EOS and PAD (vocab 259).
//                  Lossless for any byte string and needs no vocabulary file.
//   sentencepiece  a SentencePiece model (BPE or unigram, the format Llama 2 ships), held as
//                  its serialized ModelProto bytes (data/sentencepiece.hpp).
// Both encode a document as BOS + ids + EOS; the dataset file and checkpoints record which
// tokenizer made the ids (TokenizerInfo, data/dataset.hpp).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/dataset.hpp"

namespace lct {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Name, type, vocabulary, special ids and model bytes, as a dataset records them.
  virtual const TokenizerInfo& info() const = 0;
  // BOS + the text's ids + EOS: one document. Safe to call from several threads at once.
  virtual std::vector<int32_t> encode_document(std::string_view text) const = 0;
  // Text back; special ids are skipped unless `show_special`, which renders <bos>, <eos>,
  // <pad> (and <unk> for an id outside the vocabulary).
  virtual std::string decode(const int32_t* ids, size_t n, bool show_special = false) const = 0;

  // An empty dataset that declares this tokenizer (vocabulary, name, special ids, model).
  TokenDataset empty_dataset() const;
};

struct ByteTokenizer : Tokenizer {
  static constexpr int32_t kBos = 256, kEos = 257, kPad = 258, kVocabSize = 259;
  static constexpr const char* kName = "byte";

  static TokenizerInfo byte_info();
  static void append_bytes(std::string_view text, std::vector<int32_t>& out);
  // BOS + bytes + EOS.
  static std::vector<int32_t> encode_bytes(std::string_view text);
  static std::string decode_bytes(const int32_t* ids, size_t n, bool show_special = false);

  const TokenizerInfo& info() const override;
  std::vector<int32_t> encode_document(std::string_view text) const override {
    return encode_bytes(text);
  }
  std::string decode(const int32_t* ids, size_t n, bool show_special = false) const override {
    return decode_bytes(ids, n, show_special);
  }
};

// The tokenizer a dataset or checkpoint declares; throws naming `where` when the name is
// unknown or the stored model cannot be loaded.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerInfo& info, const std::string& where);

}  // namespace lct
