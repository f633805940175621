// An fp32 array that lives on a slower tier but is addressed like memory: a private unnamed
// file on a local disk mapped into the address space, or memory of a NUMA node. Walked in
// order (the optimizer's update), only a window of it stays in this node's memory: ahead()
// starts reading the next part, done() writes back what is finished and drops it.
#pragma once
#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <string>

#include "sys/tier_store.hpp"

namespace lct {

class TierArray {
 public:
  // Its users walk it this many floats at a time (16 MiB): one chunk worked on, the next
  // read ahead, the previous being written back, so about 3 chunks are in memory.
  static constexpr size_t kStreamChunk = size_t(4) << 20;
  static constexpr size_t kWindowBytes = 3 * kStreamChunk * sizeof(float);
  // n floats, zero, taken now: a disk without room is refused here (`option` names the flag).
  TierArray(const TierSpec& spec, size_t n, const std::string& option);
  ~TierArray();
  TierArray(const TierArray&) = delete;
  TierArray& operator=(const TierArray&) = delete;

  float* data() { return p_; }
  const float* data() const { return p_; }
  size_t size() const { return n_; }
  // Elements [begin, end) will be read soon (disk: read ahead, asynchronously).
  void ahead(size_t begin, size_t end);
  // Elements [begin, end) are done with for now (disk: their writing starts; the range
  // before it, written by now, leaves memory). Correctness never depends on it: a page
  // touched again is read back.
  void done(size_t begin, size_t end);
  void flush();  // every done() range written and dropped

 private:
  void drop(size_t begin, size_t end);
  size_t n_;
  float* p_ = nullptr;
  size_t bytes_ = 0;
  int fd_ = -1;                    // disk; -1: NUMA memory
  size_t pending_b_ = 0, pending_e_ = 0;  // the last done() range, being written
};

// Where one array of a walk lies on its tier: element i of the walk is element offset + i of
// `array` (null: an array in memory, nothing to move).
struct TierWindow {
  TierArray* array;
  size_t offset;
};

// Walks elements [0, n) as the tiers' users do: body(c0, c1) on chunks of kStreamChunk, each
// tier reading the next chunk ahead before and letting its chunk go after; one chunk of all n
// when no array is on a tier. The caller flush()es when its walks are done.
template <class Body>
void stream_chunks(size_t n, std::initializer_list<TierWindow> tiers, Body body) {
  bool any = false;
  for (const TierWindow& t : tiers) any |= t.array != nullptr;
  const size_t chunk = any ? TierArray::kStreamChunk : std::max<size_t>(n, 1);
  for (size_t c0 = 0; c0 < n; c0 += chunk) {
    const size_t c1 = std::min(n, c0 + chunk), c2 = std::min(n, c1 + chunk);
    for (const TierWindow& t : tiers)
      if (t.array) t.array->ahead(t.offset + c1, t.offset + c2);
    body(c0, c1);
    for (const TierWindow& t : tiers)
      if (t.array) t.array->done(t.offset + c0, t.offset + c1);
  }
}

}  // namespace lct
