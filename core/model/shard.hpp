// Context-parallel split of a micro-batch. Each of the B sequences of S tokens is cut into
// 2N chunks of c = S / 2N tokens:
//   zigzag      rank r keeps chunks r and 2N-1-r (early, late): every rank gets the same
//               causal work;
//   contiguous  rank r keeps chunks 2r and 2r+1: under full causal attention the last rank
//               does most of the work; under a sliding window W <= S/N every rank does
//               the same and needs only the previous rank's keys (a ring of one hop).
// Tokens, targets, documents, true stream indices (causality) and RoPE positions are all
// permuted together, once per micro-batch, so masks and rotations stay exact.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/batch.hpp"

namespace lct {

enum class CpSplit { Zigzag, Contiguous };

// --cp-split: "zigzag", "contiguous", or "auto": contiguous where a sliding window fits in
// one rank's share of a sequence (0 < window <= S/N), zigzag otherwise.
CpSplit choose_cp_split(const std::string& option, int64_t window, int64_t S, int64_t N);
const char* cp_split_name(CpSplit split);

// Stream indices of the full batch that rank r holds, in its local order.
std::vector<int64_t> shard_indices(int64_t B, int64_t S, int64_t N, int64_t r, CpSplit split);

// Rank r's part of `full` (S must be divisible by 2N; checked by the caller's options).
Batch shard_batch(const Batch& full, int64_t N, int64_t r, CpSplit split);

}  // namespace lct
