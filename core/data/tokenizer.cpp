#include "data/tokenizer.hpp"

namespace lct {

TokenDataset ByteTokenizer::empty_dataset() {
  TokenDataset ds;
  ds.vocab_size = kVocabSize;
  ds.tokenizer = kName;
  ds.bos_id = kBos;
  ds.eos_id = kEos;
  ds.pad_id = kPad;
  ds.doc_offsets.push_back(0);
  return ds;
}

void ByteTokenizer::append_bytes(std::string_view text, std::vector<int32_t>& out) {
  for (unsigned char ch : text) out.push_back(int32_t(ch));
}

std::vector<int32_t> ByteTokenizer::encode_document(std::string_view text) {
  std::vector<int32_t> ids;
  ids.reserve(text.size() + 2);
  ids.push_back(kBos);
  append_bytes(text, ids);
  ids.push_back(kEos);
  return ids;
}

std::string ByteTokenizer::decode(const int32_t* ids, size_t n, bool show_special) {
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

}  // namespace lct
