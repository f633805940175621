#include "model/shard.hpp"

#include "common/error.hpp"

namespace lct {

const char* cp_split_name(CpSplit split) { return split == CpSplit::Zigzag ? "zigzag" : "contiguous"; }

std::vector<int64_t> shard_indices(int64_t B, int64_t S, int64_t N, int64_t r, CpSplit split,
                                   int64_t group) {
  if (group < 1 || N % group != 0) fail("cp group of ", group, " ranks does not divide cp = ", N);
  if (S % (2 * N) != 0) fail("sequence length ", S, " is not divisible by 2 x cp = ", 2 * N);
  const int64_t P = N / group, p = r / group, u = r % group;  // positions; ours; our part
  const int64_t c = S / (2 * P), part = 2 * c / group;
  const int64_t first = split == CpSplit::Zigzag ? p : 2 * p;
  const int64_t second = split == CpSplit::Zigzag ? 2 * P - 1 - p : 2 * p + 1;
  std::vector<int64_t> idx;
  idx.reserve(size_t(B * part));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = u * part; i < (u + 1) * part; ++i)  // position i of the pair (early, late)
      idx.push_back(b * S + (i < c ? first * c + i : second * c + i - c));
  return idx;
}

Batch shard_batch(const Batch& full, int64_t N, int64_t r, CpSplit split, int64_t group) {
  return take_rows(full, shard_indices(full.B, full.S, N, r, split, group), full.B, full.S / N);
}

Batch take_rows(const Batch& full, const std::vector<int64_t>& rows, int64_t B, int64_t S) {
  if (int64_t(rows.size()) != B * S) fail("take_rows: ", rows.size(), " rows for a micro-batch of ", B, " x ", S);
  Batch b;
  b.B = B;
  b.S = S;
  for (int64_t i : rows) {
    b.tokens.push_back(full.tokens[size_t(i)]);
    b.targets.push_back(full.targets[size_t(i)]);
    b.doc.push_back(full.doc[size_t(i)]);
    b.idx.push_back(full.idx[size_t(i)]);
    b.pos.push_back(full.pos[size_t(i)]);
    if (!full.weights.empty()) b.weights.push_back(full.weights[size_t(i)]);
  }
  return b;
}

}  // namespace lct
