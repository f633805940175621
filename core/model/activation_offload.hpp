// Which layer's saved activations sit in which resident slot, and when they move to and from
// a slower tier (sys/tier_store.hpp). A layer's set is what its backward reads: its input and,
// unless the whole layer is recomputed, what its forward kept. Without a tier every layer has
// its own slot and nothing moves.
//
// With a tier the first M layers' sets move (M = moved(), all but the last kSlots layers' unless
// asked for fewer). The first M + kSlots layers take turns in kSlots slots, set l in slot
// l % kSlots; each later layer keeps a slot of its own:
//   forward   layer l reads set l and writes set l and set l+1's input. Set l is saved right
//             after layer l when set l + kSlots will take its slot later in the pass; the
//             save runs during layer l+1 and is waited for before layer l+2 starts.
//   backward  layer l needs set l: sets l-1 .. l-kSlots+1 are loaded while it runs (their
//             slots held sets above l, whose backward is done). The last kSlots sets of the
//             rotation never leave, nor do the sets after it.
// The arithmetic is the same with or without a tier: only where the bytes wait differs.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "sys/tier_store.hpp"

namespace lct {

class ActivationOffload {
 public:
  static constexpr int64_t kSlots = 3;
  // The most sets a model of `layers` can move: all but the last kSlots layers'.
  static int64_t movable(int64_t layers) { return std::max<int64_t>(0, layers - kSlots); }
  // Sets that go to the tier in one forward pass: the first `want` layers' (-1: every movable
  // one; at most movable()); 0 without a tier.
  static int64_t moved(int64_t layers, bool tier, int64_t want = -1) {
    return tier ? (want < 0 ? movable(layers) : std::min(want, movable(layers))) : 0;
  }
  // Slots a model of `layers` keeps resident when `moved` sets move (a slot per layer when none).
  static int64_t slots(int64_t layers, int64_t moved) { return layers - moved; }

  // `store` null: nothing moves (every layer its own slot). `slot_base(s)`: where slot s
  // starts; each holds set_bytes. `moved`: how many of the first layers' sets go to `store`.
  ActivationOffload(std::unique_ptr<TierStore> store, int64_t moved, std::vector<char*> slot_base, size_t set_bytes);
  ActivationOffload(const ActivationOffload&) = delete;
  ActivationOffload& operator=(const ActivationOffload&) = delete;

  int64_t slot(int64_t l) const { return !store_ ? l : l < rotation_ ? l % kSlots : l - (rotation_ - kSlots); }
  const TierStore* store() const { return store_.get(); }

  // A forward pass starts (its embedding writes set 0's input); `saving`: a backward follows.
  void begin_forward(bool saving);
  void before_forward(int64_t l);  // set l+1's slot is free to be written
  void after_forward(int64_t l);   // set l is complete
  void before_backward(int64_t l); // set l is resident; the next ones are on their way

 private:
  std::unique_ptr<TierStore> store_;
  int64_t rotation_;  // the layers that take turns in the first kSlots slots: the moved ones and kSlots more
  std::vector<char*> base_;
  size_t set_bytes_;
  bool saving_ = false;
  std::vector<int64_t> holds_;              // per slot: the set in it (-1: none)
  std::vector<TierStore::Ticket> pending_;  // per slot: its last copy
};

}  // namespace lct
