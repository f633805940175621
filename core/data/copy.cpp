#include "data/copy.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "common/rng.hpp"
#include "data/tokenizer.hpp"

namespace lct {

namespace {

// The data that taught the copy circuit in the experiments came from a script with these
// symbols and lengths; the kind keeps them so that it makes the same kind of documents.
const std::string kSymbols = "abcdefghijklmnopqrstuvwxyz0123456789";
constexpr uint64_t kMinSymbols = 4, kMaxSymbols = 12;

// `n` distinct symbols of `pool` in a random order (Python's random.sample): a partial
// Fisher-Yates shuffle, the first n of a random order.
std::string sample_distinct(Rng& rng, std::string pool, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    std::swap(pool[i], pool[i + size_t(rng.below(pool.size() - i))]);
    out.push_back(pool[i]);
  }
  return out;
}

// 4 to 12 distinct symbols (Python's random.sample): distinct, so that every symbol of the
// first copy has one successor and the second copy is a plain copy, no choice among several.
// With probability `repeats`, digits drawn with replacement instead: a symbol then recurs
// with other successors ("92225": after the second 2 comes 2, after the third 5), as in
// passkeys, where a copy circuit that matches the last symbol alone picks the wrong one;
// the place in the string has to be found from more than the last symbol.
std::string random_string(Rng& rng, double repeats) {
  const size_t n = size_t(kMinSymbols + rng.below(kMaxSymbols - kMinSymbols + 1));
  if (repeats > 0 && rng.uniform() < repeats) {  // no draw at 0: the distinct data stays as it was
    std::string s;
    for (size_t i = 0; i < n; ++i) s.push_back(char('0' + rng.below(10)));
    return s;
  }
  return sample_distinct(rng, kSymbols, n);
}

// A word between the copies of `s`: 3 to 6 distinct symbols that `s` does not hold, so that
// none of them is a symbol of the string being copied.
std::string gap_word(Rng& rng, const std::string& s) {
  std::string pool;
  for (char c : kSymbols)
    if (s.find(c) == std::string::npos) pool.push_back(c);
  const size_t n = size_t(3 + rng.below(4));
  return sample_distinct(rng, pool, n);
}

// "S S. ": the length of one pair of `symbols`-symbol strings.
constexpr size_t pair_size(uint64_t symbols) { return size_t(2 * symbols + 3); }

}  // namespace

int64_t copy_min_doc_length() { return int64_t(2 + pair_size(kMaxSymbols)); }

TokenDataset make_copy_dataset(const SyntheticSpec& spec,
                               const std::function<void(int64_t)>& progress) {
  if (spec.num_docs < 1) fail("copy: the number of documents must be at least 1");
  if (!(spec.copy_repeats >= 0 && spec.copy_repeats <= 1))
    fail("copy: the share of strings with repeated symbols is ", spec.copy_repeats, "; give 0 to 1");
  if (spec.copy_gap_words < 0)
    fail("copy: the words between the copies are at most ", spec.copy_gap_words, "; give 0 or more");
  const int64_t min_len = copy_min_doc_length();
  // Document d has lengths[d % n] tokens (doc_lengths, as passkey's), or doc_length each.
  const std::vector<int64_t> lengths = spec.doc_lengths.empty() ? std::vector<int64_t>{spec.doc_length}
                                                                 : spec.doc_lengths;
  const int64_t shortest = *std::min_element(lengths.begin(), lengths.end());
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  if (shortest < min_len)
    fail("copy: documents of ", shortest, " tokens cannot hold a string and its copy; ",
         "with strings of up to ", kMaxSymbols, " symbols they need at least ", min_len, " tokens");

  TokenDataset ds = ByteTokenizer().empty_dataset();
  ds.source = cat("synthetic copy: ", spec.num_docs, " documents of ",
                  shortest == longest ? std::to_string(shortest) : cat(shortest, " to ", longest),
                  " tokens, seed ", spec.seed);
  if (spec.copy_repeats > 0) ds.source += cat(", ", spec.copy_repeats, " of the strings digits with repeats");
  if (spec.copy_gap_words > 0) ds.source += cat(", 0 to ", spec.copy_gap_words, " words between the copies");
  double total = 0;
  for (int64_t d = 0; d < spec.num_docs; ++d) total += double(lengths[size_t(d) % lengths.size()]);
  ds.tokens.reserve(size_t(total));
  ds.loss_weights.reserve(size_t(total));

  // With words between, the copy's first symbol follows a random number of them: unscored.
  const bool gapped = spec.copy_gap_words > 0;
  const size_t first_scored = gapped ? 1 : 0;
  for (int64_t d = 0; d < spec.num_docs; ++d) {
    const size_t budget = size_t(lengths[size_t(d) % lengths.size()] - 2);  // text bytes between BOS and EOS
    Rng rng(spec.seed, uint64_t(d));
    std::string text;
    std::vector<size_t> answers;  // byte offsets of the second copies' symbols in `text`
    // Pairs until the text is full; the last is cut at the length, as in the script (a cut
    // second copy still scores the symbols it has).
    while (text.size() < budget) {
      const std::string s = random_string(rng, spec.copy_repeats);
      text += s + ' ';
      // No draw without words between: the adjacent data stays as it was.
      const uint64_t words = gapped ? rng.below(uint64_t(spec.copy_gap_words) + 1) : 0;
      for (uint64_t w = 0; w < words; ++w) text += gap_word(rng, s) + ' ';
      for (size_t k = first_scored; k < s.size(); ++k) answers.push_back(text.size() + k);
      text += s + ". ";
    }
    text.resize(budget);
    std::erase_if(answers, [&](size_t a) { return a >= budget; });
    append_synthetic_document(ds, text, answers);
    if (progress) progress(d + 1);
  }
  return ds;
}

}  // namespace lct
