// Byte-level tokenizer: ids 0..255 are the bytes of UTF-8 text, then BOS, EOS and PAD.
// Lossless for any byte string and needs no vocabulary file.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/dataset.hpp"

namespace lct {

struct ByteTokenizer {
  static constexpr int32_t kBos = 256, kEos = 257, kPad = 258, kVocabSize = 259;
  static constexpr const char* kName = "byte";

  // An empty dataset that declares this tokenizer (vocabulary, name, special ids).
  static TokenDataset empty_dataset();
  // BOS + bytes + EOS: one document.
  static std::vector<int32_t> encode_document(std::string_view text);
  static void append_bytes(std::string_view text, std::vector<int32_t>& out);
  // Bytes back; special ids are skipped unless `show_special`, which renders <bos> etc.
  static std::string decode(const int32_t* ids, size_t n, bool show_special = false);
};

}  // namespace lct
