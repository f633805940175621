#include "kernels/dq_order.hpp"

#include <algorithm>

#include "common/error.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace lct {

namespace {
void pause_cpu() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}
}  // namespace

KeyRuns::KeyRuns(int64_t kv_heads, int64_t nk, int threads) : run(kMaxKeyRun) {
  while (run > 1 && kv_heads * ((nk + run - 1) / run) < 8 * int64_t(threads)) run /= 2;
  runs = (nk + run - 1) / run;
  tasks = kv_heads * runs;
}

DqTurns::DqTurns(int64_t heads, int64_t max_query_blocks)
    : turn_(std::make_unique<std::atomic<int64_t>[]>(size_t(std::max<int64_t>(1, heads * max_query_blocks)))),
      size_(std::max<int64_t>(1, heads * max_query_blocks)) {}

void DqTurns::start(const TileGrid& grid, int64_t heads) {
  if (heads * grid.nq > size_) fail("DqTurns: ", heads * grid.nq, " turns asked of ", size_);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t ib = 0; ib < grid.nq; ++ib)
      of(h, ib, grid.nq).store(grid.next_visible(ib, 0), std::memory_order_relaxed);
}

float* DqQueue::slot() {
  settle(kSlots - 1);
  return slots_ + (first_ + queued_) % kSlots * slot_floats_;
}

void DqQueue::push(int64_t h, int64_t ib, int64_t jb, int64_t rows) {
  pending_[(first_ + queued_++) % kSlots] = {h, ib, jb, rows, slots_ + (first_ + queued_ - 1) % kSlots * slot_floats_};
  settle(kSlots);
}

void DqQueue::drain() { settle(0); }

void DqQueue::settle(int64_t keep) {
  for (; queued_ > 0; ++first_, --queued_)
    if (!add(pending_[first_ % kSlots], queued_ > keep)) break;
}

// Adds p once every earlier key block has added its own to the same (head, query block),
// then passes the turn on; without `wait`, only if that has happened already.
bool DqQueue::add(const Pending& p, bool wait) {
  std::atomic<int64_t>& turn = t_.turns->of(p.h, p.ib, t_.grid->nq);
  while (turn.load(std::memory_order_acquire) != p.jb) {
    if (!wait) return false;
    if (progress_ && *progress_) (*progress_)();
    pause_cpu();
  }
  const int64_t D = t_.D, ldq = t_.H * D, i0 = p.ib * t_.grid->BQ;
  for (int64_t r = 0; r < p.rows; ++r) {
    float* out = t_.dq + (i0 + r) * ldq + p.h * D;
    const float* src = p.dq + r * D;
    for (int64_t x = 0; x < D; ++x) out[x] += t_.scale * src[x];
  }
  turn.store(t_.grid->next_visible(p.ib, p.jb + 1), std::memory_order_release);
  return true;
}

}  // namespace lct
