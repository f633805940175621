// Which layer's saved activations sit in which resident slot, and when they move to and from
// a slower tier (sys/tier_store.hpp). A layer's set is what its backward reads: its input and,
// unless the whole layer is recomputed, what its forward kept. Without a tier every layer has
// its own slot and nothing moves.
//
// With a tier there are kSlots slots, set l in slot l % kSlots:
//   forward   layer l reads set l and writes set l and set l+1's input. Set l is saved right
//             after layer l when set l + kSlots will take its slot later in the pass; the
//             save runs during layer l+1 and is waited for before layer l+2 starts.
//   backward  layer l needs set l: sets l-1 .. l-kSlots+1 are loaded while it runs (their
//             slots held sets above l, whose backward is done). The last kSlots sets of the
//             forward never leave.
// The arithmetic is the same with or without a tier: only where the bytes wait differs.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "sys/tier_store.hpp"

namespace lct {

class ActivationOffload {
 public:
  static constexpr int64_t kSlots = 3;
  // Slots a model of `layers` keeps resident (all of them without a tier).
  static int64_t slots(int64_t layers, bool tier) { return tier && layers > kSlots ? kSlots : layers; }
  // Sets that go to the tier in one forward pass (0 where every set stays).
  static int64_t moved(int64_t layers, bool tier) { return tier && layers > kSlots ? layers - kSlots : 0; }

  // `slot_base(s)`: where slot s starts; each holds set_bytes.
  ActivationOffload(std::unique_ptr<TierStore> store, int64_t layers, std::vector<char*> slot_base, size_t set_bytes);
  ActivationOffload(const ActivationOffload&) = delete;
  ActivationOffload& operator=(const ActivationOffload&) = delete;

  int64_t slot(int64_t l) const { return store_ ? l % kSlots : l; }
  const TierStore* store() const { return store_.get(); }

  // A forward pass starts (its embedding writes set 0's input); `saving`: a backward follows.
  void begin_forward(bool saving);
  void before_forward(int64_t l);  // set l+1's slot is free to be written
  void after_forward(int64_t l);   // set l is complete
  void before_backward(int64_t l); // set l is resident; the next ones are on their way

 private:
  std::unique_ptr<TierStore> store_;
  int64_t layers_;
  std::vector<char*> base_;
  size_t set_bytes_;
  bool saving_ = false;
  std::vector<int64_t> holds_;              // per slot: the set in it (-1: none)
  std::vector<TierStore::Ticket> pending_;  // per slot: its last copy
};

}  // namespace lct
