#include "data/tokenizer.hpp"

#include "common/error.hpp"
#include "data/sentencepiece.hpp"

namespace lct {

TokenDataset Tokenizer::empty_dataset() const {
  const TokenizerInfo& t = info();
  TokenDataset ds;
  ds.vocab_size = t.vocab_size;
  ds.tokenizer = t.name;
  ds.tokenizer_type = t.type;
  ds.tokenizer_model = t.model;
  ds.bos_id = t.bos_id;
  ds.eos_id = t.eos_id;
  ds.pad_id = t.pad_id;
  ds.doc_offsets.push_back(0);
  return ds;
}

TokenizerInfo ByteTokenizer::byte_info() {
  TokenizerInfo t;
  t.name = kName;
  t.vocab_size = kVocabSize;
  t.bos_id = kBos;
  t.eos_id = kEos;
  t.pad_id = kPad;
  return t;
}

const TokenizerInfo& ByteTokenizer::info() const {
  static const TokenizerInfo t = byte_info();
  return t;
}

void ByteTokenizer::append_bytes(std::string_view text, std::vector<int32_t>& out) {
  for (unsigned char ch : text) out.push_back(int32_t(ch));
}

std::vector<int32_t> ByteTokenizer::encode_bytes(std::string_view text) {
  std::vector<int32_t> ids;
  ids.reserve(text.size() + 2);
  ids.push_back(kBos);
  append_bytes(text, ids);
  ids.push_back(kEos);
  return ids;
}

std::string ByteTokenizer::decode_bytes(const int32_t* ids, size_t n, bool show_special) {
  std::string s;
  s.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    if (id >= 0 && id < 256) {
      s.push_back(char(id));
    } else if (show_special) {
      s += id == kBos ? "<bos>" : id == kEos ? "<eos>" : id == kPad ? "<pad>" : "<unk>";
    }
  }
  return s;
}

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerInfo& info, const std::string& where) {
  if (info.name == ByteTokenizer::kName) return std::make_unique<ByteTokenizer>();
  if (info.name == SentencePieceTokenizer::kName)
    return std::make_unique<SentencePieceTokenizer>(info.model, where);
  fail(where, ": tokenizer '", info.name, "' is not one this version knows (byte, sentencepiece)");
}

}  // namespace lct
