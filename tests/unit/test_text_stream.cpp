// Streaming prepare's pieces: documents cut from text that arrives in pieces of any size are
// those of the whole text, and the parallel encoding keeps input order and reports the first
// invalid UTF-8 in input order.
#include <gtest/gtest.h>

#include "common/error.hpp"
#include "data/text_stream.hpp"
#include "data/tokenizer.hpp"

namespace lct {
namespace {

// The documents of `text` split whole (the rule prepare follows): pieces between
// separators, empty ones dropped.
std::vector<std::string> split_whole(const std::string& text, const std::string& sep) {
  std::vector<std::string> out;
  for (size_t start = 0;;) {
    const size_t at = text.find(sep, start);
    const std::string piece = text.substr(start, at == std::string::npos ? std::string::npos : at - start);
    if (!piece.empty()) out.push_back(piece);
    if (at == std::string::npos) break;
    start = at + sep.size();
  }
  return out;
}

TEST(TextStream, DocumentsCutFromPiecesOfAnySizeAreThoseOfTheWholeText) {
  const std::string text = "--|first doc--|second--|--|--|third -| doc--|-";
  for (const std::string sep : {"--|", "-", "doc", "x"}) {
    const std::vector<std::string> want = split_whole(text, sep);
    for (size_t piece : {size_t(1), size_t(2), size_t(3), size_t(5), text.size()}) {
      DocumentSplitter split(sep, 4);
      std::vector<TextDocument> got;
      for (size_t i = 0; i < text.size(); i += piece) split.feed(std::string_view(text).substr(i, piece), got);
      split.finish(got);
      ASSERT_EQ(got.size(), want.size()) << "separator '" << sep << "', pieces of " << piece;
      for (size_t d = 0; d < got.size(); ++d) {
        EXPECT_EQ(got[d].text, want[d]);
        EXPECT_EQ(text.substr(got[d].offset, got[d].text.size()), got[d].text);  // where it was
        EXPECT_EQ(got[d].file, 4u);
      }
    }
  }
  DocumentSplitter whole("", 0);  // no separator: the file is one document
  std::vector<TextDocument> got;
  whole.feed("ab", got);
  whole.feed("cd", got);
  EXPECT_TRUE(got.empty());
  whole.finish(got);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].text, "abcd");
}

TEST(TextStream, ParallelEncodingKeepsInputOrderAndNamesTheFirstInvalidByte) {
  std::vector<TextDocument> docs;
  for (int i = 0; i < 500; ++i) docs.push_back({std::string(size_t(1 + (i * 37) % 300), char('a' + i % 26)), size_t(i), size_t(i % 2)});
  const EncodeDocument encode = [](std::string_view t) { return ByteTokenizer::encode_bytes(t); };
  const auto ids = encode_documents(docs, {"a.txt", "b.txt"}, encode);
  ASSERT_EQ(ids.size(), docs.size());
  for (size_t i = 0; i < docs.size(); ++i) EXPECT_EQ(ids[i], ByteTokenizer::encode_bytes(docs[i].text)) << i;
  docs[301].text[5] = char(0xff);  // file b.txt, at its offset 301 + 5
  docs[402].text[0] = char(0xc0);  // later in input order: not the one named
  try {
    encode_documents(docs, {"a.txt", "b.txt"}, encode);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'b.txt' is not UTF-8 text: invalid byte 0xff at offset 306"),
              std::string::npos) << e.what();
  }
}

TEST(TextStream, AnEncodersErrorNamesTheFirstFailingDocumentsFileAndOffset) {
  std::vector<TextDocument> docs;
  for (int i = 0; i < 64; ++i) docs.push_back({i == 17 || i == 40 ? "bad" : "good", size_t(100 + i), size_t(i % 2)});
  const EncodeDocument encode = [](std::string_view t) -> std::vector<int32_t> {
    if (t == "bad") fail("cannot encode");
    return ByteTokenizer::encode_bytes(t);
  };
  try {
    encode_documents(docs, {"a.txt", "b.txt"}, encode);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'b.txt', the document at offset 117: cannot encode"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace lct
