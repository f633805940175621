// A slower memory tier that holds numbered blocks of one size: a private file on a local disk,
// or memory on a chosen NUMA node. One I/O thread moves blocks between it and the caller's
// memory in the order they were asked for, so the caller's compute goes on meanwhile. It knows
// nothing of what the bytes are (activations, optimizer state).
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace lct {

// Where a tier lives, parsed once at the door: "" (none), a directory, or "numa:N".
struct TierSpec {
  enum class Kind { None, Disk, Numa };
  Kind kind = Kind::None;
  std::string dir;  // Disk
  int node = -1;    // Numa
  // `option` names the flag in messages (e.g. "--offload-activations").
  static TierSpec parse(const std::string& text, const std::string& option);
  bool on() const { return kind != Kind::None; }
  std::string describe() const;  // "disk /scratch/x" or "NUMA node 1"
};

// A private file of `bytes` in spec.dir (zeros, its room taken: a disk without it is refused,
// naming `option`); `direct`: ask for direct I/O and say whether it was granted.
int open_tier_file(const TierSpec& spec, size_t bytes, const std::string& option, bool* direct = nullptr);
// `bytes` of spec.node's memory, zeroed now (its pages taken before any step needs them): a
// node without room is refused, naming `option`. Freed with numa_free(p, bytes).
void* take_numa_memory(const TierSpec& spec, size_t bytes, const std::string& option);

class TierStore {
 public:
  // Memory and sizes on this boundary go to and from disk by direct I/O (no page cache, the
  // device's DMA instead of the CPU); others are copied through the page cache.
  static constexpr size_t kAlign = 4096;
  // Room for `blocks` blocks of `block_bytes`, taken now: a disk without that much free
  // space, or a NUMA node that does not exist, is refused here, before any work.
  TierStore(const TierSpec& spec, size_t block_bytes, int64_t blocks, const std::string& option);
  ~TierStore();  // waits for what is queued; the file (already unlinked) goes with it
  TierStore(const TierStore&) = delete;
  TierStore& operator=(const TierStore&) = delete;

  using Ticket = uint64_t;
  // Queue a copy of `bytes` (<= block_bytes) into block i, or out of it into dst. The memory
  // must stay untouched (save) or unread (load) until wait() on the ticket returns.
  Ticket save(int64_t block, const void* src, size_t bytes);
  Ticket load(int64_t block, void* dst, size_t bytes);
  // Blocks until the ticket's copy (and every earlier one) is done; an I/O error of any of
  // them fails here with what happened and how to fix it. Ticket 0 is always done.
  void wait(Ticket t);
  void wait_all() { wait(issued_); }

  size_t bytes() const { return block_bytes_ * size_t(blocks_); }
  size_t bytes_moved() const { return moved_; }
  double busy_seconds() const { return busy_s_; }  // the I/O thread's time in copies

 private:
  struct Job {
    Ticket ticket;
    bool save;
    int64_t block;
    char* mem;
    size_t bytes;
  };
  void run();  // the I/O thread
  void copy(const Job& j);  // throws Error
  Ticket queue(Job j);

  std::string option_, where_;
  size_t block_bytes_;
  int64_t blocks_;
  int fd_ = -1;          // Disk
  bool direct_ = false;  // fd_ is O_DIRECT
  char* numa_ = nullptr;  // Numa: blocks_ x block_bytes_ on the node
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::deque<Job> jobs_;
  Ticket issued_ = 0, completed_ = 0;
  std::string error_;  // the first I/O failure, reported by every later wait()
  bool stop_ = false;
  size_t moved_ = 0;
  double busy_s_ = 0;
  std::thread thread_;
};

// What a tier moves per second through a TierStore (one I/O thread, direct I/O on disk, as
// --offload-activations moves a layer's set): `blocks` blocks of `block_bytes` written, then
// read back, each direction timed alone.
struct TierRates {
  double write_gbs = 0, read_gbs = 0;
};
TierRates measure_tier(const TierSpec& spec, const std::string& option, size_t block_bytes = size_t(64) << 20,
                       int64_t blocks = 4);

}  // namespace lct
