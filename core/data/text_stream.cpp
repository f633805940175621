#include "data/text_stream.hpp"

#include <omp.h>

#include <exception>

#include "common/error.hpp"
#include "data/text.hpp"

namespace lct {

void DocumentSplitter::emit(std::string text, std::vector<TextDocument>& out) {
  if (!text.empty()) out.push_back({std::move(text), cur_offset_, file_});
}

void DocumentSplitter::feed(std::string_view piece, std::vector<TextDocument>& out) {
  // Search from where a separator could still start: the last |sep| - 1 bytes held.
  size_t from = sep_.empty() || cur_.size() < sep_.size() ? 0 : cur_.size() - sep_.size() + 1;
  cur_.append(piece);
  consumed_ += piece.size();
  if (sep_.empty()) return;
  size_t start = 0;
  for (size_t at; (at = cur_.find(sep_, std::max(from, start))) != std::string::npos;) {
    emit(cur_.substr(start, at - start), out);
    start = at + sep_.size();
    cur_offset_ = consumed_ - cur_.size() + start;
  }
  cur_.erase(0, start);
}

void DocumentSplitter::finish(std::vector<TextDocument>& out) {
  emit(std::move(cur_), out);
  cur_.clear();
}

std::vector<std::vector<int32_t>> encode_documents(const std::vector<TextDocument>& docs,
                                                   const std::vector<std::string>& file_names,
                                                   const EncodeDocument& encode) {
  const int64_t n = int64_t(docs.size());
  std::vector<std::vector<int32_t>> ids(docs.size());
  std::vector<size_t> bad(docs.size(), std::string_view::npos);  // first invalid byte per doc
  std::exception_ptr error;  // the encoder's, of the first document in input order
  int64_t error_doc = n;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) {
    const std::string& text = docs[size_t(i)].text;
    bad[size_t(i)] = first_invalid_utf8(text);
    if (bad[size_t(i)] != std::string_view::npos) continue;
    try {
      ids[size_t(i)] = encode(text);
    } catch (...) {
#pragma omp critical(lct_encode_error)
      if (i < error_doc) {
        error_doc = i;
        error = std::current_exception();
      }
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    if (i == error_doc) std::rethrow_exception(error);
    const TextDocument& d = docs[size_t(i)];
    if (bad[size_t(i)] != std::string_view::npos)
      fail("'", file_names[d.file], "' is not UTF-8 text: invalid byte 0x", std::hex,
           unsigned(static_cast<unsigned char>(d.text[bad[size_t(i)]])), std::dec, " at offset ",
           d.offset + bad[size_t(i)], "; convert it first (e.g. iconv -f LATIN1 -t UTF-8)");
  }
  return ids;
}

}  // namespace lct
