// Text that arrives in pieces (files read a few MiB at a time) -> documents -> ids, in
// batches encoded in parallel, so that prepare holds a batch of documents, not its input.
// The encoding of one document is one function (EncodeDocument): the byte tokenizer's, or
// any other tokenizer's.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace lct {

// A document's text -> its ids (BOS, ..., EOS included). Called from several threads at once.
using EncodeDocument = std::function<std::vector<int32_t>(std::string_view text)>;

struct TextDocument {
  std::string text;
  size_t offset = 0;  // of its first byte in its file, for messages
  size_t file = 0;    // index of its file
};

// Cuts a file's pieces into documents: one per piece between separators, or the whole file
// when the separator is empty (then that document is held whole). Empty documents are
// dropped. A separator split across two pieces is found.
class DocumentSplitter {
 public:
  DocumentSplitter(std::string separator, size_t file) : sep_(std::move(separator)), file_(file) {}
  void feed(std::string_view piece, std::vector<TextDocument>& out);
  void finish(std::vector<TextDocument>& out);  // the end of the file ends its last document

 private:
  void emit(std::string text, std::vector<TextDocument>& out);
  std::string sep_, cur_;
  size_t file_, cur_offset_ = 0, consumed_ = 0;  // cur_ starts at cur_offset_; bytes fed
};

// Throws lct::Error naming the file (file_names[doc.file]) and byte offset of the first
// invalid UTF-8 in input order. Checked on the OpenMP threads.
void check_utf8(const std::vector<TextDocument>& docs, const std::vector<std::string>& file_names);

// Encodes docs[i] into ids[i] on the OpenMP threads (dynamic schedule: documents differ in
// length), the output in input order, after check_utf8. An encoder's lct::Error, of the
// first failing document in input order, is thrown naming that document's file and offset.
std::vector<std::vector<int32_t>> encode_documents(const std::vector<TextDocument>& docs,
                                                   const std::vector<std::string>& file_names,
                                                   const EncodeDocument& encode);

}  // namespace lct
