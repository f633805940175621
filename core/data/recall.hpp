// Synthetic associative recall ("recall"): documents dense in key-value statements, where
// names come back and their keys must be recalled. It teaches what passkey retrieval needs
// (find where "The <name> key is" was said before and copy the digits that followed) with
// dozens of scored answers per document instead of one, which is what makes a small model
// learn retrieval in minutes (multi-query associative recall, Arora et al. 2023, "Zoology").
//
// A document is statements in the passkey's own words, with passkey filler between them:
//   "The qwzr key is 40317. " a new name with a fresh random key, or a name said before
//   with its key again: "The qwzr key is 40317. " or "What is the qwzr key? The qwzr key
//   is 40317. ". The answers are the digits of every repeated key.
#pragma once
#include <cstdint>
#include <functional>

#include "data/dataset.hpp"
#include "data/passkey.hpp"  // SyntheticSpec

namespace lct {

// The shortest document that holds one statement and its repeat as a question.
int64_t recall_min_doc_length(int32_t key_digits);

// Deterministic in the spec: document d draws from stream (seed, d) only; every document is
// doc_length tokens (doc_lengths is passkey's). The dataset's loss_weights mark the answers
// (1 on each digit of a repeated key, 0 elsewhere); the caller drops them to score every
// token. `progress` is told the documents made so far.
TokenDataset make_recall_dataset(const SyntheticSpec& spec,
                                 const std::function<void(int64_t docs)>& progress = {});

}  // namespace lct
