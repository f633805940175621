#include "model/shard.hpp"

#include "common/error.hpp"

namespace lct {

CpSplit choose_cp_split(const std::string& option, int64_t window, int64_t S, int64_t N) {
  if (option == "zigzag") return CpSplit::Zigzag;
  if (option == "contiguous") return CpSplit::Contiguous;
  if (option != "auto") fail("--cp-split ", option, ": use auto, zigzag or contiguous");
  return window > 0 && window <= S / N ? CpSplit::Contiguous : CpSplit::Zigzag;
}

const char* cp_split_name(CpSplit split) { return split == CpSplit::Zigzag ? "zigzag" : "contiguous"; }

std::vector<int64_t> shard_indices(int64_t B, int64_t S, int64_t N, int64_t r, CpSplit split) {
  if (S % (2 * N) != 0) fail("sequence length ", S, " is not divisible by 2 x cp = ", 2 * N);
  const int64_t c = S / (2 * N);
  const int64_t first = split == CpSplit::Zigzag ? r : 2 * r;
  const int64_t second = split == CpSplit::Zigzag ? 2 * N - 1 - r : 2 * r + 1;
  std::vector<int64_t> idx;
  idx.reserve(size_t(B * 2 * c));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t chunk : {first, second})
      for (int64_t t = 0; t < c; ++t) idx.push_back(b * S + chunk * c + t);
  return idx;
}

Batch shard_batch(const Batch& full, int64_t N, int64_t r, CpSplit split) {
  const std::vector<int64_t> idx = shard_indices(full.B, full.S, N, r, split);
  Batch b;
  b.B = full.B;
  b.S = full.S / N;
  for (int64_t i : idx) {
    b.tokens.push_back(full.tokens[size_t(i)]);
    b.targets.push_back(full.targets[size_t(i)]);
    b.doc.push_back(full.doc[size_t(i)]);
    b.idx.push_back(full.idx[size_t(i)]);
    b.pos.push_back(full.pos[size_t(i)]);
  }
  return b;
}

}  // namespace lct
