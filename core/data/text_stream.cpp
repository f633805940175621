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

void check_utf8(const std::vector<TextDocument>& docs, const std::vector<std::string>& file_names) {
  const int64_t n = int64_t(docs.size());
  std::vector<size_t> bad(docs.size());  // first invalid byte per document
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) bad[size_t(i)] = first_invalid_utf8(docs[size_t(i)].text);
  for (size_t i = 0; i < docs.size(); ++i) {
    if (bad[i] == std::string_view::npos) continue;
    const TextDocument& d = docs[i];
    fail("'", file_names[d.file], "' is not UTF-8 text: invalid byte 0x", std::hex,
         unsigned(static_cast<unsigned char>(d.text[bad[i]])), std::dec, " at offset ", d.offset + bad[i],
         "; convert it first (e.g. iconv -f LATIN1 -t UTF-8)");
  }
}

std::vector<std::vector<int32_t>> encode_documents(const std::vector<TextDocument>& docs,
                                                   const std::vector<std::string>& file_names,
                                                   const EncodeDocument& encode) {
  check_utf8(docs, file_names);
  const int64_t n = int64_t(docs.size());
  std::vector<std::vector<int32_t>> ids(docs.size());
  std::exception_ptr error;  // the encoder's, of the first document in input order
  int64_t error_doc = n;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) {
    try {
      ids[size_t(i)] = encode(docs[size_t(i)].text);
    } catch (...) {
#pragma omp critical(lct_encode_error)
      if (i < error_doc) {
        error_doc = i;
        error = std::current_exception();
      }
    }
  }
  if (!error) return ids;
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {  // say which document, so that it can be looked at
    const TextDocument& d = docs[size_t(error_doc)];
    fail("'", file_names[d.file], "', the document at offset ", d.offset, ": ", e.what());
  }
}

}  // namespace lct
