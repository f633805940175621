// Work-balanced placement of a micro-batch's tokens over the R ranks that share it (the
// dp x cp ranks of a ring: --balance cost).
//
// Attention work is additive over queries: under the causal document mask a query at
// position i of its document sees i + 1 keys (min(i + 1, W) under a sliding window W), so a
// rank's attention work is the sum of that over the queries it holds, whatever else it holds.
// Every rank holds the same number of tokens (the model's buffers have one shape), so its
// linear work is the same everywhere and only where the queries go decides the balance.
//
// Today's placement (the baseline) gives dp rank d the sequences d*B .. d*B+B-1 and cuts each
// over the cp ranks by the plan's split. Documents vary in length, so the rank whose
// sequences hold the long documents sets every step's pace. The balanced placement takes
// the documents costliest first:
//   1. a document stays whole on the least-loaded rank with room for it while that keeps the
//      rank within 0.5% of the mean attention work (short documents: no ring traffic);
//   2. any other is cut into pieces of equal length dealt over every rank in snake order,
//      costliest first (2R pieces, the zigzag, rank r taking r and 2R-1-r; 8R under a sliding
//      window), so each rank gets 1/R of its tokens and of its work, and the ring carries its
//      keys between them (the ring's plan finds the hops from the tokens' tags);
//   3. padding fills what room is left.
// Documents dealt are placed before those kept whole (a second pass when the first had to
// deal one it meant to keep). On power-law document mixes the ranks end within 1% of each
// other in attention work (tests/unit/test_balance.cpp).
// Tokens keep their stream index, document id and RoPE position, so the mask and rotation
// are exact and the losses and gradients are the baseline's up to summation order. It is a
// function of the batch alone: every rank computes the same placement, and a resumed run the
// same one again. When the balanced placement predicts no better balance than the baseline,
// the baseline is kept.
#pragma once
#include <cstdint>
#include <vector>

#include "model/batch.hpp"

namespace lct {

// FLOPs of one token through the linear layers and of one visible query-key pair (both
// forward + backward), so that a rank's work is per_token * tokens + per_pair * pairs.
struct WorkModel {
  double per_token = 0, per_pair = 1;
};

struct Placement {
  std::vector<std::vector<int64_t>> rows;  // [R][tokens per rank] stream indices, ascending
  std::vector<double> pairs;               // [R] visible query-key pairs of each rank's queries
  std::vector<double> baseline_pairs;      // [R] the same under the baseline
  bool balanced = false;                   // false: the baseline was kept
  int64_t split_docs = 0;                  // documents spread over several ranks
};

// [T] keys each query of `full` sees under the causal document mask (0 on padding).
std::vector<double> query_keys(const Batch& full, int64_t window);

// The visible pairs of the queries of `full` at stream indices `rows`.
double pairs_of(const Batch& full, const std::vector<int64_t>& rows, int64_t window);

// `baseline`: R lists of stream indices of `full`, the same length each.
Placement balance_placement(const Batch& full, const std::vector<std::vector<int64_t>>& baseline,
                            int64_t window, const WorkModel& m);

// max / mean of per_token * tokens + per_pair * pairs[r] over the ranks.
double predicted_imbalance(const std::vector<double>& pairs, int64_t tokens_per_rank, const WorkModel& m);

}  // namespace lct
