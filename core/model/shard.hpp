// Context-parallel split of a micro-batch. Each of the B sequences of S tokens is cut into
// 2N chunks of c = S / 2N tokens:
//   zigzag      rank r keeps chunks r and 2N-1-r (early, late): every rank gets the same
//               causal work;
//   contiguous  rank r keeps chunks 2r and 2r+1: under full causal attention the last rank
//               does most of the work; under a sliding window W <= S/N every rank does
//               the same and needs only the previous rank's keys (a ring of one hop).
// Hybrid context parallelism (group = U > 1): the N cp ranks form N / U positions of U
// consecutive ranks; the chunks are cut for the N / U positions as above (2N/U chunks), and
// the chunk pair of position p = r / U, in its local order (early, late), is split into U
// equal consecutive parts, rank r keeping part r % U. The U ranks' parts concatenated in
// order are exactly position p's pair: after Ulysses' all-to-all, the ring ranks hold their
// zigzag pairs for N / U ranks and the ring's causal work is balanced. group = 1 is the
// plain split.
// Tokens, targets, documents, true stream indices (causality) and RoPE positions are all
// permuted together, once per micro-batch, so masks and rotations stay exact.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/batch.hpp"

namespace lct {

enum class CpSplit { Zigzag, Contiguous };

// The split a run takes is its plan's choice (ParallelPlan::split_for).
const char* cp_split_name(CpSplit split);

// Stream indices of the full batch that rank r holds, in its local order.
std::vector<int64_t> shard_indices(int64_t B, int64_t S, int64_t N, int64_t r, CpSplit split,
                                   int64_t group = 1);

// Rank r's part of `full` (S must be divisible by 2N; checked by the caller's options).
Batch shard_batch(const Batch& full, int64_t N, int64_t r, CpSplit split, int64_t group = 1);

// The tokens of `full` at stream indices `rows`, in that order, as a micro-batch of B x S
// (B * S = rows.size()): every array permuted together.
Batch take_rows(const Batch& full, const std::vector<int64_t>& rows, int64_t B, int64_t S);

}  // namespace lct
