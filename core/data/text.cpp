#include "data/text.hpp"

#include <omp.h>

#include <algorithm>

#include "common/error.hpp"
#include "data/tokenizer.hpp"

namespace lct {

size_t first_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = p[i];
    size_t len;
    unsigned cp;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    else return i;
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    const unsigned min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char e = s[++i];
      out.push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e);
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

Documents split_documents(const std::vector<TextSource>& sources, const std::string& separator) {
  Documents docs;
  size_t bytes_before = 0;  // of the sources before this one
  auto add = [&](std::string_view doc, size_t end) {
    if (doc.empty()) return;
    docs.text.push_back(doc);
    docs.bytes_done.push_back(bytes_before + end);
  };
  for (const TextSource& src : sources) {
    const size_t bad = first_invalid_utf8(src.text);
    if (bad != std::string_view::npos)
      fail("'", src.name, "' is not UTF-8 text: invalid byte 0x", std::hex,
           unsigned(static_cast<unsigned char>(src.text[bad])), std::dec, " at offset ", bad,
           "; convert it first (e.g. iconv -f LATIN1 -t UTF-8)");
    const std::string_view text = src.text;
    if (separator.empty()) {
      add(text, text.size());
      bytes_before += text.size();
      continue;
    }
    for (size_t start = 0; start <= text.size();) {
      const size_t at = text.find(separator, start);
      const size_t end = at == std::string_view::npos ? text.size() : at;
      add(text.substr(start, end - start), end);
      start = end + separator.size();
      if (at == std::string_view::npos) break;
    }
    bytes_before += text.size();
  }
  if (docs.text.empty()) fail("the input holds no text: every file (or piece) is empty");
  std::string names;
  for (size_t i = 0; i < sources.size() && i < 3; ++i) names += (i ? ", " : "") + sources[i].name;
  if (sources.size() > 3) names += cat(" and ", sources.size() - 3, " more");
  docs.source = cat("text: ", names);
  return docs;
}

TokenDataset tokenize_documents(const Documents& docs, const Tokenizer& tokenizer,
                                const std::function<void(int64_t, size_t)>& progress) {
  TokenDataset ds = tokenizer.empty_dataset();
  ds.source = docs.source;
  const int64_t n = int64_t(docs.text.size());
  // A batch is encoded in parallel into its own vectors, then appended in order: the ids
  // do not depend on the thread count. A batch ends at 1024 documents, or at 16 MB of text
  // once every thread has a document, so that progress is told often for long documents.
  constexpr int64_t kBatchDocs = 1024;
  constexpr size_t kBatchBytes = size_t(16) << 20;
  const int64_t threads = omp_get_max_threads();
  std::vector<std::vector<int32_t>> ids(size_t(std::min(n, kBatchDocs)));
  for (int64_t first = 0, count = 0; first < n; first += count) {
    size_t bytes = 0;
    for (count = 0; first + count < n && count < kBatchDocs; ++count) {
      if (bytes >= kBatchBytes && count >= threads) break;
      bytes += docs.text[size_t(first + count)].size();
    }
    std::string error;
#pragma omp parallel for schedule(dynamic)
    for (int64_t i = 0; i < count; ++i) {
      try {
        ids[size_t(i)] = tokenizer.encode_document(docs.text[size_t(first + i)]);
      } catch (const Error& e) {
#pragma omp critical(lct_tokenize_error)
        if (error.empty()) error = cat("document ", first + i, ": ", e.what());
      }
    }
    if (!error.empty()) throw Error(error);
    for (int64_t i = 0; i < count; ++i) {
      ds.tokens.insert(ds.tokens.end(), ids[size_t(i)].begin(), ids[size_t(i)].end());
      ds.doc_offsets.push_back(int64_t(ds.tokens.size()));
    }
    if (progress) progress(first + count, docs.bytes_done[size_t(first + count - 1)]);
  }
  return ds;
}

TokenDataset tokenize_texts(const std::vector<TextSource>& sources, const std::string& separator,
                            const std::function<void(int64_t, size_t)>& progress,
                            const Tokenizer* tokenizer) {
  const ByteTokenizer byte;
  return tokenize_documents(split_documents(sources, separator), tokenizer ? *tokenizer : byte, progress);
}

}  // namespace lct
