#include "kernels/dq_order.hpp"

#include <algorithm>
#include <cmath>

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

KeyRuns::KeyRuns(int64_t heads, int64_t key_blocks, int threads) : kv_heads(heads), nk(key_blocks), run(kMaxKeyRun) {
  while (run > 1 && kv_heads * ((nk + run - 1) / run) < 8 * int64_t(threads)) run /= 2;
  tasks = kv_heads * ((nk + run - 1) / run);
}

DqTurns::DqTurns(int64_t heads, int64_t max_query_blocks)
    : size_(std::max<int64_t>(1, heads * max_query_blocks)),
      turn_(std::make_unique<std::atomic<int64_t>[]>(size_t(size_))) {}

void DqTurns::start(const TileGrid& grid, int64_t heads) {
  if (heads * grid.nq > size_) fail("DqTurns: ", heads * grid.nq, " turns asked of ", size_);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t ib = 0; ib < grid.nq; ++ib)
      of(h, ib, grid.nq).store(grid.next_visible(ib, 0), std::memory_order_relaxed);
}

float* DqQueue::slot() {
  settle(kSlots - 1);
  return slot_at(first_ + queued_);
}

void DqQueue::push(int64_t h, int64_t ib, int64_t jb, int64_t rows) {
  const int64_t i = first_ + queued_++;
  pending_[i % kSlots] = {h, ib, jb, rows, slot_at(i)};
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
  const int64_t D = t_.D, ldq = t_.H * D;
  float* rows = rows_of(p.h, p.ib);
  for (int64_t r = 0; r < p.rows; ++r) {
    float* out = rows + r * ldq;
    const float* src = p.dq + r * D;
    for (int64_t x = 0; x < D; ++x) out[x] = std::fma(t_.scale, src[x], out[x]);
  }
  pass(p.h, p.ib, p.jb);
  return true;
}

float* DqQueue::rows_of(int64_t h, int64_t ib) const { return t_.dq + ib * t_.grid->BQ * t_.H * t_.D + h * t_.D; }

float* DqQueue::in_place(int64_t h, int64_t ib, int64_t jb) const {
  if (t_.turns->of(h, ib, t_.grid->nq).load(std::memory_order_acquire) != jb) return nullptr;
  return rows_of(h, ib);
}

void DqQueue::pass(int64_t h, int64_t ib, int64_t jb) {
  t_.turns->of(h, ib, t_.grid->nq).store(t_.grid->next_visible(ib, jb + 1), std::memory_order_release);
}

}  // namespace lct
