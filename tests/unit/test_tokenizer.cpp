// Tokenizers: SentencePiece models trained in memory encode and decode losslessly (byte
// fallback for characters never seen), training is reproducible, the parallel document
// encoder gives the plain sequential loop's ids in input order, and the dataset file keeps
// the model. Python's sentencepiece gives the same ids: tests/cli/tokenizer_cases.py.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "common/error.hpp"
#include "data/sentencepiece.hpp"
#include "data/text_stream.hpp"
#include "io/dataset_file.hpp"

namespace lct {
namespace {

// Documents of an invented lexicon with some accented words: varied enough for 600 pieces.
std::vector<std::string> corpus(int docs, unsigned seed) {
  std::mt19937 rng(seed);
  const char* syl[] = {"ka", "lo", "mi", "tur", "sen", "bra", "qui", "dov", "el", "ash", "pri", "zon"};
  const char* extra[] = {"Straße", "café", "déjà", "garçon", "über", "naïve"};
  std::vector<std::string> words;
  for (int w = 0; w < 600; ++w) {
    std::string s;
    for (unsigned k = 0, n = 1 + rng() % 4; k < n; ++k) s += syl[rng() % 12];
    words.push_back(s);
  }
  std::vector<std::string> out;
  for (int d = 0; d < docs; ++d) {
    std::string text;
    for (unsigned i = 0, n = 20 + rng() % 60; i < n; ++i) {
      if (i) text += ' ';
      if (rng() % 8) text += words[rng() % words.size()];
      else text += extra[rng() % 6];
      if (rng() % 15 == 0) text += ".\n";
    }
    out.push_back(text);
  }
  return out;
}

std::vector<std::string_view> views(const std::vector<std::string>& docs) {
  return {docs.begin(), docs.end()};
}

// Never in the corpus: CJK, emoji, Cyrillic, a tab, runs of spaces, a leading space.
const char* kUnseen[] = {"漢字 and 🦀 crabs", "  leading\tand   runs", "русский текст 12345", ""};

class TrainedModel : public ::testing::TestWithParam<const char*> {};

TEST_P(TrainedModel, RoundTripsUnseenTextThroughByteFallbackAndTrainsReproducibly) {
  const std::vector<std::string> docs = corpus(300, 3);
  const std::string model = train_sentencepiece(views(docs), GetParam(), 600);
  EXPECT_EQ(model, train_sentencepiece(views(docs), GetParam(), 600)) << "training is not reproducible";
  const SentencePieceSpec spec = read_sentencepiece_spec(model);
  EXPECT_TRUE(spec.ok);
  EXPECT_EQ(spec.type, GetParam());
  EXPECT_TRUE(spec.byte_fallback);

  const SentencePieceTokenizer t(model, "the trained model");
  const TokenizerInfo& i = t.info();
  EXPECT_EQ(i.name, "sentencepiece");
  EXPECT_EQ(i.vocab_size, 600);
  EXPECT_EQ(i.bos_id, 1);
  EXPECT_EQ(i.eos_id, 2);
  EXPECT_EQ(i.pad_id, 3);
  for (const std::string& d : {docs[0], docs[1]}) {
    const std::vector<int32_t> ids = t.encode_document(d);
    EXPECT_LT(ids.size(), d.size() / 2) << "the model barely compresses its own training text";
    EXPECT_EQ(t.decode(ids.data(), ids.size()), d);
  }
  for (const char* text : kUnseen) {
    const std::vector<int32_t> ids = t.encode_document(text);
    ASSERT_GE(ids.size(), 2u);
    EXPECT_EQ(ids.front(), 1);
    EXPECT_EQ(ids.back(), 2);
    EXPECT_EQ(t.decode(ids.data(), ids.size()), text);
    EXPECT_EQ(t.decode(ids.data(), ids.size(), true), std::string("<bos>") + text + "<eos>");
    for (int32_t id : ids) EXPECT_NE(id, 0) << "unk in '" << text << "': byte fallback is off";
  }
  const int32_t outside[] = {1, 5000, 2};
  EXPECT_EQ(t.decode(outside, 3, true), "<bos><unk><eos>");
}

INSTANTIATE_TEST_SUITE_P(Types, TrainedModel, ::testing::Values("bpe", "unigram"));

TEST(SentencePiece, ParallelEncodingGivesTheSequentialIdsInInputOrder) {
  const std::vector<std::string> text = corpus(2500, 5);
  const SentencePieceTokenizer t(train_sentencepiece(views(text), "bpe", 500), "model");
  std::vector<TextDocument> docs;
  for (const std::string& d : text) docs.push_back({d, 0, 0});
  const int threads = omp_get_max_threads();
  omp_set_num_threads(4);
  const auto ids = encode_documents(docs, {"a.txt"}, [&t](std::string_view d) { return t.encode_document(d); });
  omp_set_num_threads(threads);
  ASSERT_EQ(ids.size(), text.size());
  for (size_t d = 0; d < text.size(); ++d) EXPECT_EQ(ids[d], t.encode_document(text[d])) << d;  // the plain loop
  const TokenDataset ds = t.empty_dataset();
  EXPECT_EQ(ds.tokenizer, "sentencepiece");
  EXPECT_EQ(ds.tokenizer_type, "bpe");
}

TEST(SentencePiece, RefusesBytesThatAreNotAModelAndVocabulariesThatCannotHoldTheText) {
  EXPECT_FALSE(read_sentencepiece_spec("some text, not a protocol buffer").ok);
  EXPECT_FALSE(read_sentencepiece_spec("").ok);
  try {
    SentencePieceTokenizer("\x0a\xff\xff", "'x.model'", "give a model");
    FAIL() << "accepted a broken model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'x.model' is not a SentencePiece model"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("give a model"), std::string::npos) << e.what();
  }
  const std::vector<std::string> docs = {"abcdefghij klmnopqrst"};
  EXPECT_THROW(train_sentencepiece(views(docs), "bpe", 262), Error);
}

TEST(TokenizerInfo, FingerprintsTellModelsApartAndCheckpointsWithoutOneMatchAnyData) {
  const std::vector<std::string> docs = corpus(200, 9);
  const TokenizerInfo a = SentencePieceTokenizer(train_sentencepiece(views(docs), "bpe", 400), "a").info();
  const TokenizerInfo b = SentencePieceTokenizer(train_sentencepiece(views(docs), "bpe", 401), "b").info();
  const TokenizerInfo byte = ByteTokenizer::byte_info();
  EXPECT_NE(a.fingerprint(), b.fingerprint());
  EXPECT_NE(a.fingerprint(), byte.fingerprint());
  EXPECT_EQ(a.fingerprint(), TokenizerInfo(a).fingerprint());
  EXPECT_NO_THROW(check_same_tokenizer(a, "ckpt.h5", a, "d.h5"));
  EXPECT_NO_THROW(check_same_tokenizer(TokenizerInfo{}, "model.h5", a, "d.h5"));
  EXPECT_THROW(check_same_tokenizer(a, "ckpt.h5", b, "d.h5"), Error);
  EXPECT_THROW(check_same_tokenizer(byte, "ckpt.h5", a, "d.h5"), Error);
}

TEST(SentencePiece, DatasetFileKeepsTheModelAndDecodesFromItAlone) {
  const std::vector<std::string> text = corpus(50, 11);
  const SentencePieceTokenizer t(train_sentencepiece(views(text), "unigram", 400), "model");
  TokenDataset ds = t.empty_dataset();
  for (const std::string& d : {text[0], std::string(kUnseen[0])}) {
    const std::vector<int32_t> ids = t.encode_document(d);
    ds.tokens.insert(ds.tokens.end(), ids.begin(), ids.end());
    ds.doc_offsets.push_back(int64_t(ds.tokens.size()));
  }
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("lct_spm_" + std::to_string(::getpid()) + ".h5")).string();
  write_dataset_file(file, ds, Provenance{}, true);
  const TokenDataset r = read_dataset_file(file);
  std::filesystem::remove(file);
  EXPECT_EQ(r.tokens, ds.tokens);
  EXPECT_EQ(r.tokenizer_model, t.info().model);
  EXPECT_EQ(r.tokenizer_type, "unigram");
  const std::unique_ptr<Tokenizer> back = make_tokenizer(tokenizer_info(r), file);
  EXPECT_EQ(back->decode(r.tokens.data() + r.doc_offsets[1], size_t(r.doc_length(1))), kUnseen[0]);
}

}  // namespace
}  // namespace lct
