// Text files -> documents -> token ids, with any tokenizer (byte by default).
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "data/dataset.hpp"
#include "data/tokenizer.hpp"

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

// The documents of some sources, in order: views into the sources' text.
struct Documents {
  std::vector<std::string_view> text;
  std::vector<size_t> bytes_done;  // [docs] input bytes consumed up to the end of each document
  std::string source;              // "text: a.txt, b.txt and 3 more", for the dataset
};

// One document per source, or one per piece between separators when `separator` is not
// empty. Empty pieces are skipped. Throws lct::Error naming the source and byte offset of
// invalid UTF-8, or when no document remains.
Documents split_documents(const std::vector<TextSource>& sources, const std::string& separator);

// Each document as BOS + ids + EOS, in input order. Documents are encoded in parallel
// (OpenMP) in batches (1024 documents, or 16 MB of text); `progress` is told the documents
// done and the input bytes they cover after each batch.
TokenDataset tokenize_documents(const Documents& docs, const Tokenizer& tokenizer,
                                const std::function<void(int64_t docs, size_t bytes)>& progress = {});

// split_documents, then tokenize_documents with `tokenizer` (byte when null).
TokenDataset tokenize_texts(const std::vector<TextSource>& sources, const std::string& separator,
                            const std::function<void(int64_t docs, size_t bytes)>& progress = {},
                            const Tokenizer* tokenizer = nullptr);

}  // namespace lct
