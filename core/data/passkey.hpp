// Synthetic long-context retrieval ("passkey"): a random key hidden at a random depth inside
// filler text and asked for at the end. The filler is predictable, the key is not: only a
// model that attends back across the whole document can produce it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace lct {

// What every synthetic kind (passkey, recall, copy) is made from: one spec, filled once from
// prepare's options. Each kind reads the fields it has a use for: copy has no keys, and only
// passkey takes several lengths.
struct SyntheticSpec {
  int64_t num_docs = 0;
  int64_t doc_length = 0;  // tokens per document, BOS and EOS included
  int32_t key_digits = 5;  // passkey, recall
  uint64_t seed = 0;
  // passkey: several context lengths in one dataset: document d has doc_lengths[d % size]
  // tokens (the lengths cycle, so any prefix of the documents holds every length); empty =
  // doc_length.
  std::vector<int64_t> doc_lengths = {};
  // copy: the share of strings made of digits drawn with replacement (repeats, as in a
  // passkey), the rest distinct symbols of a-z0-9; 0 = all distinct.
  double copy_repeats = 0.0;
  // copy: at most this many random words between a string and its second copy (0 to N each
  // time), so that the copy can be found only by its symbols, not by its place; 0 = "S S. ".
  int64_t copy_gap_words = 0;
};

// n document lengths drawn from a power law on [lo, hi]: density proportional to
// length^-alpha (alpha = 1: log-uniform). Long-context corpora look like this: most documents
// short, a few very long, so that the attention work of a packed sequence varies far more
// than its token count. Deterministic in `seed`.
std::vector<int64_t> power_law_lengths(int64_t n, int64_t lo, int64_t hi, double alpha, uint64_t seed);

// `n` characters of the passkey's filler text, starting `phase` characters into its cycle
// (the recall generator writes the same filler between its statements).
std::string passkey_filler(size_t phase, size_t n);
size_t passkey_filler_period();

// The depth bucket of a key at `depth` (0 = start, 1 = end) among `buckets` equal ones:
// [0, 1/B), [1/B, 2/B), ..., [(B-1)/B, 1]; the last one holds depth 1.
int passkey_depth_bucket(double depth, int buckets);

// Refuses what no synthetic task can make (`task` names it): keys of other than 1 to 18
// digits (they must fit int64), no documents.
void check_synthetic_counts(const char* task, int32_t key_digits, int64_t num_docs);

// Appends BOS `text` EOS to `ds` as its next document, byte-tokenized, with its loss weights:
// 1 on the bytes of `text` at the offsets `answers`, 0 elsewhere (recall and copy, which mark
// their answers as they write them).
void append_synthetic_document(TokenDataset& ds, const std::string& text,
                               const std::vector<size_t>& answers);

// The shortest document that holds the instructions, the key and the question.
int64_t passkey_min_doc_length(int32_t key_digits);

// Deterministic in the spec: document d draws from stream (seed, d) only. `progress` is
// told the documents made so far after each one.
TokenDataset make_passkey_dataset(const SyntheticSpec& spec,
                                  const std::function<void(int64_t docs)>& progress = {});

// A loss mask for `ds` (made by make_passkey_dataset): 1 on each answer digit, 0 elsewhere,
// so that training counts only the predictions of the key (TokenDataset::loss_weights).
std::vector<float> passkey_answer_mask(const TokenDataset& ds);

}  // namespace lct
