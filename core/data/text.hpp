// Text files -> tokenised documents with the byte tokenizer.
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "data/dataset.hpp"

namespace lct {

struct TextSource {
  std::string name;  // for messages (a file path)
  std::string text;
};

// Offset of the first byte that breaks UTF-8 (overlong forms, surrogates and code points
// above U+10FFFF included), or npos when the text is valid.
size_t first_invalid_utf8(std::string_view text);

// "\n", "\t", "\\" in a separator given on the command line become the characters.
std::string unescape(const std::string& s);

// One document per source, or one per piece between separators when `separator` is not
// empty. Empty pieces are skipped. Throws lct::Error naming the source and byte offset of
// invalid UTF-8, or when no document remains. `progress` is told the documents made and
// the input bytes consumed so far after each document.
TokenDataset tokenize_texts(const std::vector<TextSource>& sources, const std::string& separator,
                            const std::function<void(int64_t docs, size_t bytes)>& progress = {});

}  // namespace lct
