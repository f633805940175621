// Feeds packed sequences to training: the dataset is packed once (data/packing.hpp), and each
// epoch visits its sequences in a fresh random order drawn from (seed, epoch). The position
// (epoch, cursor) is part of a checkpoint, so a resumed run sees exactly the same data. Only
// the document offsets are needed: the tokens are read per batch (model/batch.hpp).
#pragma once
#include <cstdint>
#include <vector>

#include "data/packing.hpp"
#include "model/batch.hpp"

namespace lct {

class DataLoader {
 public:
  DataLoader(const DatasetInfo& info, int64_t seq_len, uint64_t seed);
  // The next n sequences (every rank draws the same ones and keeps its slice).
  std::vector<const PackedSequence*> take(int64_t n);
  int64_t epoch() const { return epoch_; }
  int64_t cursor() const { return cursor_; }
  void seek(int64_t epoch, int64_t cursor);
  const Packing& packing() const { return packing_; }

 private:
  void shuffle();
  Packing packing_;
  uint64_t seed_;
  int64_t epoch_ = 0, cursor_ = 0;
  std::vector<int64_t> order_;
};

}  // namespace lct
