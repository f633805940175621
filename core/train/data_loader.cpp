#include "train/data_loader.hpp"

#include <numeric>

#include "common/rng.hpp"

namespace lct {

DataLoader::DataLoader(const DatasetInfo& info, int64_t seq_len, uint64_t seed)
    : packing_(pack_documents(info.doc_offsets, seq_len)), seed_(seed) {
  shuffle();
}

void DataLoader::shuffle() {
  order_.resize(packing_.sequences.size());
  std::iota(order_.begin(), order_.end(), 0);
  Rng rng(seed_, uint64_t(epoch_));
  for (size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[rng.below(i)]);
}

void DataLoader::seek(int64_t epoch, int64_t cursor) {
  epoch_ = epoch;
  cursor_ = cursor;
  shuffle();
}

std::vector<const PackedSequence*> DataLoader::take(int64_t n) {
  std::vector<const PackedSequence*> seqs;
  for (int64_t b = 0; b < n; ++b) {
    if (cursor_ >= int64_t(order_.size())) seek(epoch_ + 1, 0);
    seqs.push_back(&packing_.sequences[size_t(order_[size_t(cursor_++)])]);
  }
  return seqs;
}

}  // namespace lct
