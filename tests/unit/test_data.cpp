// Tokenizer, UTF-8 checks, passkey, recall and copy generation, and packing.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "common/error.hpp"
#include "data/copy.hpp"
#include "data/packing.hpp"
#include "data/passkey.hpp"
#include "data/recall.hpp"
#include "data/text.hpp"
#include "data/text_stream.hpp"
#include "data/tokenizer.hpp"
#include "train/evaluate.hpp"

namespace lct {
namespace {

TEST(ByteTokenizer, RoundTripsEveryByteAndUtf8) {
  std::string text = "Grüße, 世界! \xF0\x9F\x98\x80 tab\tnewline\n";
  for (int b = 0; b < 256; ++b) text.push_back(char(b));
  const auto ids = ByteTokenizer::encode_bytes(text);
  ASSERT_EQ(ids.size(), text.size() + 2);
  EXPECT_EQ(ids.front(), ByteTokenizer::kBos);
  EXPECT_EQ(ids.back(), ByteTokenizer::kEos);
  EXPECT_EQ(ByteTokenizer::decode_bytes(ids.data(), ids.size()), text);
  EXPECT_EQ(ByteTokenizer::decode_bytes(ids.data(), 3, true), "<bos>Gr");
}

TEST(Utf8, AcceptsValidAndLocatesInvalid) {
  EXPECT_EQ(first_invalid_utf8("plain ascii"), std::string_view::npos);
  EXPECT_EQ(first_invalid_utf8("Grüße 世界 \xF0\x9F\x98\x80"), std::string_view::npos);
  EXPECT_EQ(first_invalid_utf8("ab\xFF"), 2u);              // never valid
  EXPECT_EQ(first_invalid_utf8("ab\xC3"), 2u);              // truncated sequence
  EXPECT_EQ(first_invalid_utf8("\xC0\xAF"), 0u);            // overlong '/'
  EXPECT_EQ(first_invalid_utf8("x\xED\xA0\x80"), 1u);       // UTF-16 surrogate
  EXPECT_EQ(first_invalid_utf8("\xF4\x90\x80\x80"), 0u);    // above U+10FFFF
}

// Whole texts (one file each) cut and byte-encoded as prepare does (data/text_stream.hpp).
TokenDataset encode_texts(const std::vector<std::pair<std::string, std::string>>& files, const std::string& separator) {
  std::vector<TextDocument> docs;
  std::vector<std::string> names;
  for (const auto& [name, text] : files) {
    DocumentSplitter split(separator, names.size());
    names.push_back(name);
    split.feed(text, docs);
    split.finish(docs);
  }
  TokenDataset ds = ByteTokenizer().empty_dataset();
  const EncodeDocument encode = [](std::string_view t) { return ByteTokenizer::encode_bytes(t); };
  for (const std::vector<int32_t>& ids : encode_documents(docs, names, encode)) {
    ds.tokens.insert(ds.tokens.end(), ids.begin(), ids.end());
    ds.doc_offsets.push_back(int64_t(ds.tokens.size()));
  }
  return ds;
}

TEST(Text, SplitsOnSeparatorAndSkipsEmptyPieces) {
  const TokenDataset ds = encode_texts({{"a", "one\n\ntwo\n\n\n\nthree"}, {"b", ""}, {"c", "four"}},
                                       unescape("\\n\\n"));
  ASSERT_EQ(ds.num_docs(), 4);
  EXPECT_EQ(ByteTokenizer::decode_bytes(ds.tokens.data() + ds.doc_offsets[1], size_t(ds.doc_length(1))), "two");
  EXPECT_EQ(ByteTokenizer::decode_bytes(ds.tokens.data() + ds.doc_offsets[3], size_t(ds.doc_length(3))), "four");
  EXPECT_NO_THROW(validate(ds, "test"));
}

TEST(Text, RejectsInvalidUtf8NamingFileAndOffset) {
  try {
    encode_texts({{"good.txt", "fine"}, {"bad.txt", "abc\xFF"}}, "");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'bad.txt' is not UTF-8 text"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("offset 3"), std::string::npos);
  }
  // An empty file is no document (prepare refuses input that holds none).
  EXPECT_EQ(encode_texts({{"empty", ""}}, "").num_docs(), 0);
}

SyntheticSpec spec(uint64_t seed) { return {40, 300, 5, seed}; }

TEST(Passkey, IsDeterministicInItsSeed) {
  const TokenDataset a = make_passkey_dataset(spec(7)), b = make_passkey_dataset(spec(7));
  const TokenDataset c = make_passkey_dataset(spec(8));
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.passkey.depth, b.passkey.depth);
  EXPECT_NE(a.tokens, c.tokens);
}

TEST(Passkey, AnswerIsTheHiddenKeyAtTheEnd) {
  const TokenDataset ds = make_passkey_dataset(spec(3));
  ASSERT_EQ(ds.num_docs(), 40);
  EXPECT_NO_THROW(validate(ds, "passkey"));
  std::set<std::string> keys;
  int shallow = 0, deep = 0;
  for (int64_t d = 0; d < ds.num_docs(); ++d) {
    ASSERT_EQ(ds.doc_length(d), 300);
    const int32_t* doc = ds.tokens.data() + ds.doc_offsets[d];
    const std::string text = ByteTokenizer::decode_bytes(doc, 300);
    const std::string key = ByteTokenizer::decode_bytes(doc + ds.passkey.answer_offset[d],
                                                  size_t(ds.passkey.answer_length[d]));
    ASSERT_EQ(key.size(), 5u);
    EXPECT_EQ(key.find_first_not_of("0123456789"), std::string::npos);
    // The answer ends the document (just before EOS), after the question...
    EXPECT_EQ(ds.passkey.answer_offset[d] + 5, 300 - 1);
    EXPECT_EQ(doc[299], ByteTokenizer::kEos);
    EXPECT_NE(text.find("What is the pass key? The pass key is " + key), std::string::npos);
    // ...and the same key was hidden earlier, at the recorded depth.
    const size_t at = text.find("The pass key is " + key + ". Remember it.");
    ASSERT_NE(at, std::string::npos);
    const double depth = ds.passkey.depth[d];
    EXPECT_GE(depth, 0.0);
    EXPECT_LE(depth, 1.0);
    const size_t filler = 300 - size_t(passkey_min_doc_length(5));
    const size_t intro = text.find("end. ") + 5;
    EXPECT_EQ(at, intro + size_t(std::llround(depth * double(filler))));
    (depth < 0.5 ? shallow : deep)++;
    keys.insert(key);
  }
  EXPECT_GT(keys.size(), 35u);  // keys differ between documents
  EXPECT_GT(shallow, 5);        // and depths cover the document
  EXPECT_GT(deep, 5);
}

TEST(Passkey, RejectsDocumentsTooShortForTheTask) {
  EXPECT_THROW(make_passkey_dataset({4, passkey_min_doc_length(5) - 1, 5, 1}), Error);
  EXPECT_NO_THROW(make_passkey_dataset({4, passkey_min_doc_length(5), 5, 1}));
}

TEST(Recall, IsDeterministicAndEveryDocumentHasItsLength) {
  const SyntheticSpec spec{30, 400, 5, 7};
  const TokenDataset a = make_recall_dataset(spec), b = make_recall_dataset(spec);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.loss_weights, b.loss_weights);
  EXPECT_NE(a.tokens, make_recall_dataset({30, 400, 5, 8}).tokens);
  EXPECT_NO_THROW(validate(a, "recall"));
  ASSERT_EQ(a.num_docs(), 30);
  for (int64_t d = 0; d < a.num_docs(); ++d) EXPECT_EQ(a.doc_length(d), 400);
  EXPECT_THROW(make_recall_dataset({4, recall_min_doc_length(5) - 1, 5, 1}), Error);
  EXPECT_NO_THROW(make_recall_dataset({4, recall_min_doc_length(5), 5, 1}));
}

// Every scored run of digits is the key the same name was given where it was first said,
// and nothing else is scored: the mask is exactly the recalled keys.
TEST(Recall, ScoredDigitsAreTheKeyGivenEarlierToTheSameName) {
  const TokenDataset ds = make_recall_dataset({20, 700, 4, 3});
  ASSERT_EQ(ds.loss_weights.size(), ds.tokens.size());
  int64_t recalled = 0, scored = 0;
  for (float w : ds.loss_weights) scored += w > 0;
  for (int64_t d = 0; d < ds.num_docs(); ++d) {
    const int64_t begin = ds.doc_offsets[d], n = ds.doc_length(d);
    const std::string text = ByteTokenizer::decode_bytes(ds.tokens.data() + begin, size_t(n));
    ASSERT_EQ(text.size(), size_t(n) - 2);  // BOS and EOS decode to nothing
    std::map<std::string, std::string> keys;  // name -> key, as first said
    for (size_t at = text.find("The "); at != std::string::npos; at = text.find("The ", at + 1)) {
      if (at + 20 > text.size() || text.compare(at + 8, 8, " key is ") != 0) continue;  // filler
      const std::string name = text.substr(at + 4, 4), key = text.substr(at + 16, 4);
      const bool scored_here = ds.loss_weights[size_t(begin + 1 + int64_t(at) + 16)] > 0;
      auto [it, first] = keys.emplace(name, key);
      EXPECT_EQ(scored_here, !first) << "document " << d << " at " << at;
      EXPECT_EQ(it->second, key) << "document " << d << ": " << name << " changed its key";
      recalled += !first;
    }
    // Its passkey answer is the last recall, asked as the passkey's question at the very end.
    EXPECT_EQ(ds.passkey.answer_offset[size_t(d)] + 4, n - 1);
    EXPECT_EQ(text.rfind("? The "), size_t(n - 2 - 4 - 18));  // "? The qwzr key is 1234"
  }
  EXPECT_EQ(scored, 4 * recalled);
  EXPECT_GT(recalled, 20 * 5);  // dense: several recalls in every 700-token document
}

// What copy strings and the words between copies are made of.
const std::string kCopySymbols = "abcdefghijklmnopqrstuvwxyz0123456789";

SyntheticSpec copy_spec(int64_t doc_length, uint64_t seed, double repeats = 0.0) {
  return {.num_docs = 12, .doc_length = doc_length, .seed = seed, .copy_repeats = repeats};
}

// Lengths that are no multiple of a pair's: the last pair is cut anywhere.
const int64_t kCopyLengths[] = {97, 254, 512};

TEST(Copy, EveryDocumentHasItsLengthAndTheSeedDecidesTheData) {
  for (int64_t len : kCopyLengths) {
    const TokenDataset a = make_copy_dataset(copy_spec(len, 7)), b = make_copy_dataset(copy_spec(len, 7));
    EXPECT_NO_THROW(validate(a, "copy"));
    ASSERT_EQ(a.num_docs(), 12);
    for (int64_t d = 0; d < a.num_docs(); ++d) {
      ASSERT_EQ(a.doc_length(d), len);
      EXPECT_EQ(a.tokens[size_t(a.doc_offsets[d])], ByteTokenizer::kBos);
      EXPECT_EQ(a.tokens[size_t(a.doc_offsets[d] + len - 1)], ByteTokenizer::kEos);
    }
    EXPECT_TRUE(a.passkey.empty());  // nothing to retrieve: eval measures loss only
    EXPECT_EQ(a.source, cat("synthetic copy: 12 documents of ", len, " tokens, seed 7"));
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.loss_weights, b.loss_weights);
    EXPECT_NE(a.tokens, make_copy_dataset(copy_spec(len, 8)).tokens);
  }
}

// Each document is "S S. " pairs cut to its length: every complete pair is a string of 4 to
// 12 distinct symbols and its copy, and the mask is 1 exactly on the second copies' symbols
// (those a cut leaves too), 0 on BOS, EOS, the first copies, spaces and full stops. With
// copy_repeats, about that share of the strings are digits that may repeat (a string of 4
// to 12 digits repeats one with probability 0.5-1), and only digit strings repeat.
TEST(Copy, PairsAreDistinctSymbolsSaidTwiceAndOnlyTheCopiesAreScored) {
  for (const auto& [len, repeats] : {std::pair<int64_t, double>{97, 0.0}, {254, 0.0}, {512, 0.0},
                                     {254, 0.5}, {512, 0.5}, {512, 1.0}}) {
    const TokenDataset ds = make_copy_dataset(copy_spec(len, 3, repeats));
    size_t strings = 0, repeating = 0;
    ASSERT_EQ(ds.loss_weights.size(), ds.tokens.size());
    std::set<size_t> sizes;
    for (int64_t d = 0; d < ds.num_docs(); ++d) {
      const int64_t begin = ds.doc_offsets[d];
      const std::string text = ByteTokenizer::decode_bytes(ds.tokens.data() + begin, size_t(len));
      ASSERT_EQ(text.size(), size_t(len) - 2);  // BOS and EOS decode to nothing
      std::vector<float> want(size_t(len), 0.0f);
      std::string rebuilt;  // the pairs read, whole: the text is them cut to its length
      size_t complete = 0;
      for (size_t at = 0; at < text.size();) {
        const size_t space = std::min(text.find(' ', at), text.size());
        const std::string s = text.substr(at, space - at);
        EXPECT_LE(s.size(), 12u) << "document " << d << " at " << at;
        EXPECT_EQ(s.find_first_not_of(kCopySymbols), std::string::npos) << s;
        const bool digits = s.find_first_not_of("0123456789") == std::string::npos;
        const bool repeat = std::set<char>(s.begin(), s.end()).size() < s.size();
        if (repeats == 0 || !digits) {
          EXPECT_FALSE(repeat) << s << " repeats a symbol";
        }
        if (repeats == 1) {
          EXPECT_TRUE(digits) << s;
        }
        strings += 1;
        repeating += repeat;
        for (size_t k = space + 1; k < std::min(space + 1 + s.size(), text.size()); ++k) want[1 + k] = 1.0f;
        if (space + 1 + s.size() + 2 <= text.size()) {  // the copy and its ". " are whole
          EXPECT_GE(s.size(), 4u) << s;
          EXPECT_EQ(text.substr(space + 1, s.size()), s) << "document " << d << " at " << at;
          sizes.insert(s.size());
          ++complete;
        }
        rebuilt += s + ' ' + s + ". ";
        at = space + 1 + s.size() + 2;
      }
      EXPECT_EQ(rebuilt.substr(0, text.size()), text) << "document " << d;
      EXPECT_GE(complete, size_t(len - 2) / 27);  // pairs are 11 to 27 bytes
      const std::vector<float> got(ds.loss_weights.begin() + begin, ds.loss_weights.begin() + begin + len);
      EXPECT_EQ(got, want) << "document " << d;
    }
    if (len >= 254) {
      EXPECT_EQ(sizes, (std::set<size_t>{4, 5, 6, 7, 8, 9, 10, 11, 12}));
    }
    const double share = double(repeating) / double(strings);
    EXPECT_GE(share, 0.5 * repeats * 0.8) << strings << " strings";
    EXPECT_LE(share, repeats * 1.2) << strings << " strings";
  }
  EXPECT_NE(make_copy_dataset(copy_spec(254, 3, 0.5)).tokens, make_copy_dataset(copy_spec(254, 3)).tokens);
}

// copy_gap_words N: each segment before ". " is "S w1 .. wk S" with k from 0 to N (every k
// occurs), the words 3 to 6 distinct symbols none of which is in S; the mask is 1 on the
// second copy's symbols after its first (what the words' random number leaves predictable)
// and 0 elsewhere. Without words between, the data is the adjacent data, draw for draw.
TEST(Copy, WordsBetweenTheCopiesHoldNoSymbolOfTheStringAndTheCopyIsScoredAfterItsFirst) {
  for (int64_t len : {97, 254, 512}) {
    SyntheticSpec gapped = copy_spec(len, 5);
    gapped.copy_gap_words = 2;
    const TokenDataset ds = make_copy_dataset(gapped);
    EXPECT_NO_THROW(validate(ds, "copy"));
    EXPECT_EQ(ds.source, cat("synthetic copy: 12 documents of ", len, " tokens, seed 5, 0 to 2 words between the copies"));
    std::set<size_t> gaps;
    for (int64_t d = 0; d < ds.num_docs(); ++d) {
      ASSERT_EQ(ds.doc_length(d), len);
      const int64_t begin = ds.doc_offsets[d];
      const std::string text = ByteTokenizer::decode_bytes(ds.tokens.data() + begin, size_t(len));
      std::vector<float> want(size_t(len), 0.0f);
      size_t at = 0;
      for (size_t end; (end = text.find(". ", at)) != std::string::npos; at = end + 2) {
        std::vector<std::string> words;  // S, the words between, S
        for (size_t w = at; w < end;) {
          const size_t space = std::min(text.find(' ', w), end);
          words.push_back(text.substr(w, space - w));
          w = space + 1;
        }
        ASSERT_GE(words.size(), 2u) << "document " << d << " at " << at;
        const std::string& s = words.front();
        EXPECT_EQ(words.back(), s) << "document " << d << " at " << at;
        EXPECT_EQ(std::set<char>(s.begin(), s.end()).size(), s.size()) << s;
        gaps.insert(words.size() - 2);
        for (size_t w = 1; w + 1 < words.size(); ++w) {
          EXPECT_GE(words[w].size(), 3u) << words[w];
          EXPECT_LE(words[w].size(), 6u) << words[w];
          EXPECT_EQ(words[w].find_first_not_of(kCopySymbols), std::string::npos) << words[w];
          EXPECT_EQ(words[w].find_first_of(s), std::string::npos) << words[w] << " shares a symbol with " << s;
        }
        for (size_t k = end - s.size() + 1; k < end; ++k) want[1 + k] = 1.0f;
      }
      // The cut pair at the end: its second copy, if begun, is scored after its first symbol.
      const size_t space = text.find(' ', at);
      if (space != std::string::npos) {
        const std::string s = text.substr(at, space - at);
        const size_t last = text.rfind(' ');  // before the copy, or before a word between
        std::string tail = text.substr(last + 1);
        if (!tail.empty() && tail.back() == '.') tail.pop_back();
        if (!tail.empty() && s.compare(0, tail.size(), tail) == 0)  // no word shares a symbol with S
          for (size_t k = last + 2; k < last + 1 + tail.size(); ++k) want[1 + k] = 1.0f;
      }
      const std::vector<float> got(ds.loss_weights.begin() + begin, ds.loss_weights.begin() + begin + len);
      EXPECT_EQ(got, want) << "document " << d;
    }
    if (len >= 254) {
      EXPECT_EQ(gaps, (std::set<size_t>{0, 1, 2}));
    }
  }
  SyntheticSpec none = copy_spec(254, 5);
  none.copy_gap_words = 0;
  EXPECT_EQ(make_copy_dataset(none).tokens, make_copy_dataset(copy_spec(254, 5)).tokens);
  none.copy_gap_words = -1;
  EXPECT_THROW(make_copy_dataset(none), Error);
}

TEST(Copy, RejectsDocumentsTooShortForAPairAndNoDocuments) {
  EXPECT_THROW(make_copy_dataset(copy_spec(copy_min_doc_length() - 1, 1)), Error);
  EXPECT_NO_THROW(make_copy_dataset(copy_spec(copy_min_doc_length(), 1)));
  EXPECT_THROW(make_copy_dataset({.num_docs = 0, .doc_length = 256, .seed = 1}), Error);
  EXPECT_THROW(make_copy_dataset(copy_spec(256, 1, 1.5)), Error);
  EXPECT_THROW(make_copy_dataset(copy_spec(256, 1, std::nan(""))), Error);
}

// --doc-lengths: the documents take the lengths in turn, each a whole passkey document of its
// length; one length is the same data as --doc-length.
TEST(Passkey, DocumentsTakeTheLengthsInTurn) {
  SyntheticSpec several = spec(5);
  several.num_docs = 7;
  several.doc_lengths = {300, 420, 512};
  const TokenDataset ds = make_passkey_dataset(several);
  EXPECT_NO_THROW(validate(ds, "passkey"));
  ASSERT_EQ(ds.num_docs(), 7);
  for (int64_t d = 0; d < 7; ++d) {
    const int64_t len = several.doc_lengths[size_t(d % 3)];
    ASSERT_EQ(ds.doc_length(d), len);
    EXPECT_EQ(ds.passkey.answer_offset[size_t(d)] + 5, len - 1);  // the key ends the document
  }
  EXPECT_NE(ds.source.find("documents of 300, 420, 512 tokens (in turn)"), std::string::npos);
  SyntheticSpec one = spec(5);
  one.doc_lengths = {300};
  const TokenDataset a = make_passkey_dataset(one), b = make_passkey_dataset(spec(5));
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.passkey.depth, b.passkey.depth);
  EXPECT_EQ(a.source, b.source);
  several.doc_lengths = {300, passkey_min_doc_length(5) - 1};
  EXPECT_THROW(make_passkey_dataset(several), Error);
}

TEST(Passkey, DepthBucketsAreEqualFifthsWithTheEndInTheLast) {
  EXPECT_EQ(passkey_depth_bucket(0.0, 5), 0);
  EXPECT_EQ(passkey_depth_bucket(0.1999, 5), 0);
  EXPECT_EQ(passkey_depth_bucket(0.2, 5), 1);
  EXPECT_EQ(passkey_depth_bucket(0.7999, 5), 3);
  EXPECT_EQ(passkey_depth_bucket(0.8, 5), 4);
  EXPECT_EQ(passkey_depth_bucket(1.0, 5), 4);
  EXPECT_EQ(passkey_depth_bucket(0.5, 2), 1);
}

// eval's accuracy by depth x context length: one row per document length, ascending, however
// the lengths arrive.
TEST(PasskeyTable, GroupsByLengthAndDepthBucket) {
  PasskeyTable t;
  t.add(1024, 0.5, true);
  t.add(512, 0.0, false);
  t.add(1024, 1.0, false);
  t.add(2048, 0.9, true);
  t.add(512, 0.1, true);
  ASSERT_EQ(t.lengths, (std::vector<int64_t>{512, 1024, 2048}));
  ASSERT_EQ(t.total.size(), 3u * PasskeyTable::kBuckets);
  const std::vector<int64_t> total = {2, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1};
  const std::vector<int64_t> correct = {1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1};
  EXPECT_EQ(t.total, total);
  EXPECT_EQ(t.correct, correct);
  EXPECT_EQ(t.total[PasskeyTable::at(1, 4)], 1);
  EXPECT_DOUBLE_EQ(PasskeyTable::depth_edge(PasskeyTable::kBuckets), 1.0);
}

TEST(Packing, NextFitKeepsOrderPadsAndSplitsLongDocuments) {
  // Documents of 3, 4, 2, 9 and 1 tokens into sequences of 5.
  const std::vector<int64_t> off = {0, 3, 7, 9, 18, 19};
  const Packing p = pack_documents(off, 5);
  ASSERT_EQ(p.sequences.size(), 5u);
  EXPECT_EQ(p.sequences[0].used, 3);  // [3] then 4 does not fit
  EXPECT_EQ(p.sequences[1].used, 4);  // [4] then 2 does not fit
  EXPECT_EQ(p.sequences[2].used, 2);  // [2] then the 9 is split: 5 ...
  EXPECT_EQ(p.sequences[3].used, 5);
  EXPECT_EQ(p.sequences[4].used, 5);  // ... 4, then 1 fits beside it
  EXPECT_EQ(p.sequences[4].spans.size(), 2u);
  EXPECT_EQ(p.split_docs, 1);
  EXPECT_EQ(p.real_tokens, 19);
  EXPECT_DOUBLE_EQ(p.efficiency(), 19.0 / 25.0);
}

TEST(Packing, LongDocumentsWholePiecesLeaveTheOpenSequenceOpen) {
  // Documents of 7, 7, 3 and 5 tokens into sequences of 5: each 7 is a whole piece of its
  // own and a tail of 2; the two tails share one sequence (rule 1 closed the open sequence
  // at every whole piece: 6 sequences, 22/30). A document of exactly 5 is not split and
  // closes the open one, as before.
  const std::vector<int64_t> off = {0, 7, 14, 17, 22};
  const Packing p = pack_documents(off, 5);
  ASSERT_EQ(p.sequences.size(), 5u);
  const std::vector<int64_t> used = {5, 4, 5, 3, 5};
  for (size_t i = 0; i < used.size(); ++i) EXPECT_EQ(p.sequences[i].used, used[i]) << i;
  // Ordered by first token: [7a] [7a's tail, 7b's tail] [7b] [3] [5]
  EXPECT_EQ(p.sequences[1].spans.size(), 2u);
  EXPECT_EQ(p.sequences[1].spans[0].doc, 0);
  EXPECT_EQ(p.sequences[1].spans[0].start_in_doc, 5);
  EXPECT_EQ(p.sequences[1].spans[1].doc, 1);
  EXPECT_EQ(p.sequences[2].spans[0].doc, 1);
  EXPECT_EQ(p.sequences[2].spans[0].start_in_doc, 0);
  EXPECT_EQ(p.split_docs, 2);
  EXPECT_EQ(p.real_tokens, 22);
  // Every token of every document is placed exactly once.
  std::vector<int> seen(22, 0);
  for (const PackedSequence& q : p.sequences)
    for (const Span& sp : q.spans)
      for (int64_t t = sp.begin; t < sp.begin + sp.length; ++t) ++seen[size_t(t)];
  EXPECT_EQ(seen, std::vector<int>(22, 1));
}

TEST(Packing, FillSequenceMasksDocumentEndsAndPadding) {
  TokenDataset ds;
  ds.tokens = {10, 11, 12, 20, 21};
  ds.doc_offsets = {0, 3, 5};
  ds.pad_id = 99;
  const Packing p = pack_documents(ds.doc_offsets, 7);
  ASSERT_EQ(p.sequences.size(), 1u);
  std::vector<int32_t> tok(7), tgt(7), doc(7), pos(7);
  MemorySource data(ds);
  fill_sequence(data, p.sequences[0], 7, tok.data(), tgt.data(), doc.data(), pos.data());
  EXPECT_EQ(tok, (std::vector<int32_t>{10, 11, 12, 20, 21, 99, 99}));
  EXPECT_EQ(tgt, (std::vector<int32_t>{11, 12, -1, 21, -1, -1, -1}));
  EXPECT_EQ(doc, (std::vector<int32_t>{0, 0, 0, 1, 1, -1, -1}));
  EXPECT_EQ(pos, (std::vector<int32_t>{0, 1, 2, 0, 1, 0, 0}));
}

}  // namespace
}  // namespace lct
