// One micro-batch: B packed sequences of S tokens, laid end to end as one stream of
// T = B*S tokens. Document ids are unique across the whole stream, so attention (causal
// within a document) never crosses from one sequence into another.
#pragma once
#include <cstdint>
#include <algorithm>
#include <vector>

#include "data/packing.hpp"

namespace lct {

struct Batch {
  int64_t B = 0, S = 0;
  std::vector<int32_t> tokens;   // [T] input ids
  std::vector<int32_t> targets;  // [T] next token of the same document, -1 = not scored
  std::vector<int32_t> doc;      // [T] document id, -1 = padding
  std::vector<int32_t> idx;      // [T] causal order (the token's index in the stream)
  std::vector<int32_t> pos;      // [T] RoPE position: restarts at 0 in every document
  // [T] loss weight of each target (0 where not scored); empty: every scored target weighs 1
  std::vector<float> weights;
  // Its documents are spread over the ranks sharing the step (model/balance.hpp): the
  // model's spread attention, which spans those ranks, runs it.
  bool spread = false;
  int64_t tokens_total() const { return B * S; }
  int64_t valid_targets() const;
  // The sum of the scored targets' weights: the loss's normalisation (valid_targets() when
  // there are no weights, and exactly that for weights of ones).
  double target_weight() const;
  int64_t real_tokens() const;   // not padding
};

// Reads the sequences' tokens (and weights, when the source has them) from `data`.
// The loss weights to hand to the cross-entropy: null when every target weighs 1.
inline const float* weights_of(const Batch& b) { return b.weights.empty() ? nullptr : b.weights.data(); }

Batch make_batch(TokenSource& data, const std::vector<const PackedSequence*>& seqs, int64_t S);
Batch make_batch(const TokenDataset& ds, const std::vector<const PackedSequence*>& seqs, int64_t S);

// Query-key pairs the causal document mask leaves visible: sum over documents of n(n+1)/2,
// or under a sliding window W of sum over positions i < n of min(i + 1, W).
double visible_pairs(const Batch& b, int64_t window = 0);

}  // namespace lct
