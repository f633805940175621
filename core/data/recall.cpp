#include "data/recall.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/rng.hpp"
#include "data/passkey.hpp"
#include "data/tokenizer.hpp"

namespace lct {

namespace {

// The mix, fixed so that a dataset is a function of its spec: about one statement in three
// introduces a name (the rest recall one, so most statements are scored), half the recalls
// are asked as the passkey's question, and up to 48 filler characters separate statements
// (the filler's "The sky is blue." must be told apart from "The qwzr key is").
constexpr double kNewFraction = 0.35;
constexpr double kQuestionFraction = 0.5;
constexpr uint64_t kMaxGap = 48;
constexpr int kNameLetters = 4;

// "The door key is ": what a statement and a plain recall say before the key.
std::string key_is(const std::string& name) { return "The " + name + " key is "; }
std::string statement(const std::string& name, const std::string& key) {
  return key_is(name) + key + ". ";
}
std::string question(const std::string& name) {
  return "What is the " + name + " key? The " + name + " key is ";
}

std::string random_key(Rng& rng, int32_t digits) {
  std::string key(1, char('1' + rng.below(9)));  // no leading zero, as passkeys
  for (int32_t i = 1; i < digits; ++i) key.push_back(char('0' + rng.below(10)));
  return key;
}

// Names of keys: a fixed vocabulary of 4-letter words, "pass" among them, so that each
// name is a pattern the model can learn to look for (as the passkey's "pass key is" is).
const char* const kNames[] = {"pass", "door", "safe", "bank", "gate", "room", "shed", "desk",
                              "lock", "boat", "barn", "mail", "shop", "tent", "wall", "yard",
                              "cafe", "club", "dock", "farm", "fort", "hall", "hive", "lamp",
                              "mill", "mine", "park", "pool", "ring", "silo", "tomb", "well"};
constexpr size_t kNumNames = sizeof(kNames) / sizeof(kNames[0]);

std::string random_name(Rng& rng) { return kNames[rng.below(kNumNames)]; }

}  // namespace

int64_t recall_min_doc_length(int32_t key_digits) {
  const std::string key(size_t(key_digits), '0'), name(kNameLetters, 'a');
  return int64_t(2 + kMaxGap + statement(name, key).size() + question(name).size() + key.size());
}

TokenDataset make_recall_dataset(const SyntheticSpec& spec,
                                 const std::function<void(int64_t)>& progress) {
  check_synthetic_counts("recall", spec.key_digits, spec.num_docs);
  const int64_t min_len = recall_min_doc_length(spec.key_digits);
  if (spec.doc_length < min_len)
    fail("recall: documents of ", spec.doc_length, " tokens cannot hold a statement and its ",
         "recall; with ", spec.key_digits, "-digit keys they need at least ", min_len, " tokens");

  TokenDataset ds = ByteTokenizer().empty_dataset();
  ds.source = cat("synthetic recall: ", spec.num_docs, " documents of ", spec.doc_length,
                  " tokens, ", spec.key_digits, "-digit keys, seed ", spec.seed);
  ds.tokens.reserve(size_t(spec.num_docs * spec.doc_length));
  ds.loss_weights.reserve(size_t(spec.num_docs * spec.doc_length));

  const size_t budget = size_t(spec.doc_length - 2);  // text bytes between BOS and EOS
  // Every document ends as a passkey document does, asking for a key (of a random name said
  // before) with nothing after it: that last recall is its passkey answer.
  const std::string any_name(kNameLetters, 'a'), any_key(size_t(spec.key_digits), '0');
  const size_t statement_size = statement(any_name, any_key).size();  // also a plain recall
  const size_t last_question = question(any_name).size() + any_key.size();
  for (int64_t d = 0; d < spec.num_docs; ++d) {
    Rng rng(spec.seed, uint64_t(d));
    std::vector<std::string> names, keys;
    std::vector<size_t> said_at;  // byte offset in `text` where each name was first said
    std::vector<size_t> answers;  // byte offsets of scored key digits in `text`
    std::string text;
    size_t phase = size_t(rng.below(passkey_filler_period()));
    const auto recall = [&](size_t i, bool as_question) {
      text += as_question ? question(names[i]) : key_is(names[i]);
      for (int32_t k = 0; k < spec.key_digits; ++k) answers.push_back(text.size() + size_t(k));
      text += keys[i];
    };
    for (;;) {
      const size_t gap = size_t(rng.below(kMaxGap + 1));
      const bool fresh = names.empty() || (names.size() < kNumNames && rng.uniform() < kNewFraction);
      std::string name = fresh ? random_name(rng) : std::string();
      while (fresh && std::find(names.begin(), names.end(), name) != names.end()) name = random_name(rng);
      const size_t i = fresh ? names.size() : size_t(rng.below(names.size()));
      const bool as_question = !fresh && rng.uniform() < kQuestionFraction;
      const size_t length = as_question ? last_question + 2 : statement_size;
      if (text.size() + gap + length + last_question > budget) break;
      text += passkey_filler(phase, gap);
      phase += gap;
      if (fresh) {
        names.push_back(name);
        keys.push_back(random_key(rng, spec.key_digits));
        said_at.push_back(text.size());
        text += statement(name, keys.back());
      } else {
        recall(i, as_question);
        text += ". ";
      }
    }
    const size_t asked = size_t(rng.below(names.size()));
    text += passkey_filler(phase, budget - last_question - text.size());
    recall(asked, true);
    ds.passkey.answer_offset.push_back(int64_t(1 + answers.back() + 1) - spec.key_digits);
    ds.passkey.answer_length.push_back(spec.key_digits);
    ds.passkey.depth.push_back(double(said_at[asked]) / double(budget));

    append_synthetic_document(ds, text, answers);
    if (progress) progress(d + 1);
  }
  return ds;
}

}  // namespace lct
