#include "data/passkey.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.hpp"
#include "common/rng.hpp"
#include "data/tokenizer.hpp"

namespace lct {

namespace {

const std::string kIntro =
    "There is an important pass key hidden inside a lot of irrelevant text. "
    "Find it and memorize it. I will quiz you about it at the end. ";
const std::string kFiller =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";

std::string needle(const std::string& key) {
  return "The pass key is " + key + ". Remember it. " + key + " is the pass key. ";
}
std::string question() { return "What is the pass key? The pass key is "; }

// `n` characters of the filler cycle starting at `phase`: the exact length makes every
// document exactly doc_length tokens; the random phase varies the text around the key.
std::string filler(size_t phase, size_t n) {
  std::string s;
  s.reserve(n);
  for (size_t i = 0; i < n; ++i) s.push_back(kFiller[(phase + i) % kFiller.size()]);
  return s;
}

}  // namespace

int passkey_depth_bucket(double depth, int buckets) {
  return std::clamp(int(depth * buckets), 0, buckets - 1);
}

void check_synthetic_counts(const char* task, int32_t key_digits, int64_t num_docs) {
  if (key_digits < 1 || key_digits > 18)
    fail(task, ": key digits ", key_digits, " must be between 1 and 18");
  if (num_docs < 1) fail(task, ": the number of documents must be at least 1");
}

void append_synthetic_document(TokenDataset& ds, const std::string& text,
                               const std::vector<size_t>& answers) {
  const std::vector<int32_t> ids = ByteTokenizer::encode_bytes(text);  // BOS text EOS
  std::vector<float> weights(ids.size(), 0.0f);
  for (size_t a : answers) weights[1 + a] = 1.0f;  // +1: the BOS before the text
  ds.tokens.insert(ds.tokens.end(), ids.begin(), ids.end());
  ds.loss_weights.insert(ds.loss_weights.end(), weights.begin(), weights.end());
  ds.doc_offsets.push_back(int64_t(ds.tokens.size()));
}

std::vector<int64_t> power_law_lengths(int64_t n, int64_t lo, int64_t hi, double alpha, uint64_t seed) {
  if (lo < 1 || hi < lo) fail("power-law document lengths: need 1 <= min <= max, got ", lo, " and ", hi);
  Rng rng(seed, 0x6c656e67);  // a stream of its own: the documents' own draws are unchanged
  std::vector<int64_t> out;
  const double a = double(lo), b = double(hi) + 1, e = 1 - alpha;
  for (int64_t i = 0; i < n; ++i) {  // inverse CDF of x^-alpha on [lo, hi + 1)
    const double u = rng.uniform();
    const double x = std::abs(e) < 1e-12 ? a * std::pow(b / a, u)
                                         : std::pow(std::pow(a, e) + u * (std::pow(b, e) - std::pow(a, e)), 1 / e);
    out.push_back(std::clamp(int64_t(x), lo, hi));
  }
  return out;
}

int64_t passkey_min_doc_length(int32_t key_digits) {
  const std::string key(size_t(key_digits), '0');
  return int64_t(2 + kIntro.size() + needle(key).size() + question().size() + key.size());
}

TokenDataset make_passkey_dataset(const SyntheticSpec& spec,
                                  const std::function<void(int64_t)>& progress) {
  check_synthetic_counts("passkey", spec.key_digits, spec.num_docs);
  const int64_t min_len = passkey_min_doc_length(spec.key_digits);
  const std::vector<int64_t> lengths = spec.doc_lengths.empty() ? std::vector<int64_t>{spec.doc_length}
                                                                 : spec.doc_lengths;
  std::string sizes;
  for (int64_t len : lengths) {
    if (len < min_len)
      fail("passkey: documents of ", len, " tokens cannot hold the task; with ", spec.key_digits,
           "-digit keys they need at least ", min_len, " tokens");
    sizes += (sizes.empty() ? "" : ", ") + std::to_string(len);
  }
  if (lengths.size() > 8)  // drawn lengths (a power law): their range, not each
    sizes = cat(*std::min_element(lengths.begin(), lengths.end()), " to ",
                *std::max_element(lengths.begin(), lengths.end()));

  TokenDataset ds = ByteTokenizer().empty_dataset();
  ds.source = cat("synthetic passkey: ", spec.num_docs, " documents of ", sizes, " tokens",
                  lengths.size() > 1 ? " (in turn)" : "", ", ", spec.key_digits, "-digit keys, seed ",
                  spec.seed);
  double total = 0;
  for (int64_t d = 0; d < spec.num_docs; ++d) total += double(lengths[size_t(d) % lengths.size()]);
  ds.tokens.reserve(size_t(total));

  for (int64_t d = 0; d < spec.num_docs; ++d) {
    const size_t filler_total = size_t(lengths[size_t(d) % lengths.size()] - min_len);
    Rng rng(spec.seed, uint64_t(d));
    std::string key;
    key.push_back(char('1' + rng.below(9)));  // no leading zero
    for (int32_t i = 1; i < spec.key_digits; ++i) key.push_back(char('0' + rng.below(10)));
    const size_t before = size_t(rng.below(filler_total + 1));
    const size_t phase = size_t(rng.below(kFiller.size()));

    const std::string text = kIntro + filler(phase, before) + needle(key) +
                             filler(phase + before, filler_total - before) + question() + key;
    std::vector<int32_t> ids = ByteTokenizer::encode_bytes(text);
    ds.passkey.answer_offset.push_back(int64_t(ids.size()) - 1 - spec.key_digits);
    ds.passkey.answer_length.push_back(spec.key_digits);
    ds.passkey.depth.push_back(filler_total ? double(before) / double(filler_total) : 0.0);
    ds.tokens.insert(ds.tokens.end(), ids.begin(), ids.end());
    ds.doc_offsets.push_back(int64_t(ds.tokens.size()));
    if (progress) progress(d + 1);
  }
  return ds;
}

std::vector<float> passkey_answer_mask(const TokenDataset& ds) {
  std::vector<float> mask(ds.tokens.size(), 0.0f);
  const PasskeyAnswers& pk = ds.passkey;
  for (size_t d = 0; d < pk.answer_offset.size(); ++d) {
    const int64_t first = ds.doc_offsets[d] + pk.answer_offset[d];
    std::fill(mask.begin() + first, mask.begin() + first + pk.answer_length[d], 1.0f);
  }
  return mask;
}

std::string passkey_filler(size_t phase, size_t n) { return filler(phase, n); }
size_t passkey_filler_period() { return kFiller.size(); }

}  // namespace lct
