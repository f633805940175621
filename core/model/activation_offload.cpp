#include "model/activation_offload.hpp"

#include <algorithm>

namespace lct {

ActivationOffload::ActivationOffload(std::unique_ptr<TierStore> store, int64_t moved, std::vector<char*> slot_base,
                                     size_t set_bytes)
    : store_(std::move(store)), rotation_(moved + kSlots), base_(std::move(slot_base)), set_bytes_(set_bytes),
      holds_(base_.size(), -1), pending_(base_.size(), 0) {}

void ActivationOffload::begin_forward(bool saving) {
  if (!store_) return;
  store_->wait_all();  // nothing of the last pass is still moving into a slot
  saving_ = saving;
  std::fill(holds_.begin(), holds_.end(), -1);
  holds_[0] = 0;
}

void ActivationOffload::before_forward(int64_t l) {
  if (!store_ || l + 1 >= rotation_) return;  // set l+1 has a slot of its own (or is the final input)
  const int64_t s = slot(l + 1);
  store_->wait(pending_[size_t(s)]);  // its previous set is saved
  holds_[size_t(s)] = l + 1;
}

void ActivationOffload::after_forward(int64_t l) {
  if (!store_ || !saving_ || l + kSlots >= rotation_) return;  // set l stays: no later set takes its slot
  const int64_t s = slot(l);
  pending_[size_t(s)] = store_->save(l, base_[size_t(s)], set_bytes_);
}

void ActivationOffload::before_backward(int64_t l) {
  if (!store_ || l >= rotation_) return;  // set l never left
  for (int64_t j = l; j >= std::max<int64_t>(0, l - kSlots + 1); --j) {
    const int64_t s = slot(j);
    if (holds_[size_t(s)] == j) continue;
    pending_[size_t(s)] = store_->load(j, base_[size_t(s)], set_bytes_);
    holds_[size_t(s)] = j;
  }
  store_->wait(pending_[size_t(slot(l))]);
}

}  // namespace lct
