// Synthetic copying ("copy"): every string is said twice, so the second copy of each can be
// predicted only by finding the first and copying what followed it, the induction circuit
// (Olsson et al. 2022) that passkey retrieval and recall are built on. A small model learns
// it here quickly, with no key to find among filler: the first stage of a retrieval
// curriculum.
//
// A document is pairs "S S. " with S 4 to 12 distinct symbols of a-z0-9, repeated and cut
// to the document's length:
//   "k3xq9 k3xq9. 0fbm7wzt 0fbm7wzt. aqe4 aqe4. ..."
// SyntheticSpec::copy_repeats makes that share of the strings digits drawn with replacement
// ("92225 92225. "), whose second copies need the place in the string, not just the last
// symbol. SyntheticSpec::copy_gap_words puts 0 to N random words between the copies
// ("k3xq9 ub2w 7hgs k3xq9. "): adjacent copies can be learnt by position alone (copy the
// word before, symbol by symbol), and a model that learnt only that finds nothing further
// back (bench/probe_copy.py); with words between, only the symbols say where the first copy
// is, the content-based induction that retrieval needs.
#pragma once
#include <cstdint>
#include <functional>

#include "data/dataset.hpp"
#include "data/passkey.hpp"  // SyntheticSpec

namespace lct {

// The shortest document that holds one whole pair of the longest strings.
int64_t copy_min_doc_length();

// Deterministic in the spec: document d draws from stream (seed, d) only; every document is
// doc_length tokens (key_digits and doc_lengths are not copy's). The dataset's loss_weights
// mark the answers (1 on each symbol of a second copy, 0 elsewhere; with copy_gap_words not
// on its first symbol, which nothing predicts: the number of words before it is random); the caller drops them to
// score every token. There are no passkey answers. `progress` is told the documents made so
// far.
TokenDataset make_copy_dataset(const SyntheticSpec& spec,
                               const std::function<void(int64_t docs)>& progress = {});

}  // namespace lct
