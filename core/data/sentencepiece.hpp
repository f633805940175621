// SentencePiece tokenizers (Debian libsentencepiece-dev): load a serialized model (a .model
// file's bytes, the format Llama 2 ships), encode and decode; and train a BPE or unigram
// model from documents in memory. No file I/O here: the model is bytes in, bytes out.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.hpp"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace lct {

class SentencePieceTokenizer : public Tokenizer {
 public:
  static constexpr const char* kName = "sentencepiece";
  // `model` is a serialized ModelProto; throws naming `what` (a file, a dataset) when it is
  // not a SentencePiece model, or when it has no BOS or EOS piece, with `fix` (what to do)
  // appended. A model without a PAD
  // piece (Llama 2's) pads with its unk id: padding is never a target, so any id serves.
  SentencePieceTokenizer(const std::string& model, const std::string& what,
                         const std::string& fix = "the file is damaged: prepare it again");
  ~SentencePieceTokenizer() override;

  const TokenizerInfo& info() const override { return info_; }
  std::vector<int32_t> encode_document(std::string_view text) const override;
  std::string decode(const int32_t* ids, size_t n, bool show_special = false) const override;
  // The piece of one id as the model spells it ("▁the", "<0x0A>"), for inspect.
  std::string piece(int32_t id) const;
  // A piece the model learned: not unk, a control piece (BOS, EOS, PAD) or a byte piece.
  bool learned(int32_t id) const;
  bool byte_fallback() const { return byte_fallback_; }
  int32_t unk_id() const;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  TokenizerInfo info_;
  bool byte_fallback_ = false;
};

// The fields of a serialized ModelProto's TrainerSpec that lctrain reads (libsentencepiece's
// public headers do not expose the proto): model type and byte fallback. `ok` is false when
// the bytes are not a well-formed protocol buffer.
struct SentencePieceSpec {
  bool ok = false;
  std::string type = "unigram";  // the proto's default
  bool byte_fallback = false;
};
SentencePieceSpec read_sentencepiece_spec(std::string_view model);

// The libsentencepiece version built against (pkg-config's, at configure time).
std::string sentencepiece_version();

// Pieces a byte-fallback model needs besides what it learns: 256 bytes and unk, BOS, EOS, PAD.
constexpr int64_t kSentencePieceReserved = 256 + 4;

// Trains a `type` ("bpe" or "unigram") model of `vocab_size` pieces on `docs`, with byte
// fallback, ids unk 0, BOS 1, EOS 2, PAD 3, no normalisation (decode gives back the text
// exactly) and one thread, so that the same documents give the same model. Each document is
// fed line by line (long lines in pieces of at most 4096 bytes, SentencePiece's sentence
// limit). Returns the serialized model; throws with SentencePiece's reason on failure (a
// vocabulary too small for the characters, or larger than the text allows).
std::string train_sentencepiece(const std::vector<std::string_view>& docs, const std::string& type,
                                int64_t vocab_size);

}  // namespace lct
