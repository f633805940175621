// Backward's dQ summed in a fixed order by both attention paths (attention_flash.cpp,
// attention_onednn.cpp), so the bits do not depend on the thread count and no thread keeps
// a private dQ.
//
// A backward task is a run of consecutive key blocks of one KV head: it owns those blocks'
// dK/dV and walks the query blocks that see them. Each tile also contributes to its query
// block's dQ, which other tasks write too. A tile's contribution [rows, D] is added when every
// earlier key block has added its own: each (head, query block) holds a turn (the key block
// whose contribution goes next), passed on with release/acquire. A task keeps up to kSlots
// contributions waiting for their turn, so its tiles run on while an earlier task still adds
// to the same query block; a full ring waits.
//
// No deadlock: tasks are handed out in key order (run by run), a contribution waits only on
// earlier key blocks, so on tasks handed out before it, and the earliest running task never
// waits.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "kernels/attention.hpp"

namespace lct {

// The length of a backward task's run of key blocks: up to kMaxKeyRun, shorter while fewer
// than 8 tasks per thread would remain. The run does not change the bits. A query block's
// first tile in a run reads its rows from beyond L2; 8 blocks of 128 keys keep the run's
// dK/dV sums (fp32) and keys within a 1 MiB L2 and halve those first reads against 4. With
// a 512 KiB L2 (Zen 3) they no longer fit, and runs of 8 were still the faster backward.
struct KeyRuns {
  static constexpr int64_t kMaxKeyRun = 8;
  int64_t kv_heads, nk;
  int64_t run, tasks;  // blocks per run; runs per KV head x KV heads
  KeyRuns(int64_t heads, int64_t key_blocks, int threads);
  // fn(kv_head, jb0, jb1) for every task, on a parallel region of all threads. Task t is
  // handed out in increasing order (which the turns' progress needs): KV head t % kv_heads,
  // key blocks of run t / kv_heads, so side by side tasks are of different heads (different
  // turns) where there are enough heads.
  template <class F>
  void for_each(const F& fn) const {
    std::atomic<int64_t> next{0};
#pragma omp parallel
    for (int64_t t = next.fetch_add(1); t < tasks; t = next.fetch_add(1)) {
      const int64_t jb0 = t / kv_heads * run;
      fn(t % kv_heads, jb0, std::min(nk, jb0 + run));
    }
  }
};

// The per-(head, query block) turns of one call; sized once for the largest call.
class DqTurns {
 public:
  DqTurns(int64_t heads, int64_t max_query_blocks);
  void start(const TileGrid& grid, int64_t heads);  // each turn at its first visible key block
  std::atomic<int64_t>& of(int64_t h, int64_t ib, int64_t nq) { return turn_[size_t(h * nq + ib)]; }

 private:
  int64_t size_;
  std::unique_ptr<std::atomic<int64_t>[]> turn_;
};

// Where the contributions go: dq [Tq, H*D] += scale x contribution.
struct DqTarget {
  DqTurns* turns;
  const TileGrid* grid;
  float* dq;
  int64_t H, D;
  float scale;
};

// One task's contributions waiting for their turn; slots [kSlots, slot_floats] are the
// thread's scratch. progress (or null) is called while waiting.
class DqQueue {
 public:
  static constexpr int64_t kSlots = 4;
  DqQueue(const DqTarget& target, float* slots, int64_t slot_floats, const std::function<void()>* progress)
      : t_(target), slots_(slots), slot_floats_(slot_floats), progress_(progress) {}
  // Where the next tile writes its contribution [rows, D] (row stride D); waits while the
  // ring is full.
  float* slot();
  // The contribution in slot() is the tile (h, ib, jb)'s; adds what is due without waiting.
  void push(int64_t h, int64_t ib, int64_t jb, int64_t rows);
  // Where the tile (h, ib, jb) may add its contribution to dQ itself (row stride H*D, each
  // value += scale x contribution by one fused multiply-add, as add() does): its rows of
  // dQ when it is their turn now, every earlier key block's contribution added; else null.
  // Between the two turns nothing else touches those rows. After such a tile: pass().
  float* in_place(int64_t h, int64_t ib, int64_t jb) const;
  void pass(int64_t h, int64_t ib, int64_t jb);
  void drain();  // waits until every queued contribution is added

 private:
  struct Pending {
    int64_t h, ib, jb, rows;
    const float* dq;
  };
  float* slot_at(int64_t i) const { return slots_ + i % kSlots * slot_floats_; }
  float* rows_of(int64_t h, int64_t ib) const;  // (head, query block)'s first row of dQ
  bool add(const Pending& p, bool wait);
  void settle(int64_t keep);  // adds what is due, waiting while more than `keep` are queued
  DqTarget t_;
  float* slots_;
  int64_t slot_floats_;
  const std::function<void()>* progress_;
  Pending pending_[kSlots];
  int64_t first_ = 0, queued_ = 0;
};

}  // namespace lct
