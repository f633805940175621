#include "parallel/ring.hpp"

#include <immintrin.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <thread>
#include <vector>
#include <cstdint>
#include <cstring>

#include "common/error.hpp"
#include "common/fault.hpp"
#include "parallel/watchdog.hpp"
#include "parallel/world.hpp"

namespace lct {

namespace {

// `rank` of `from` as a rank of `to` (MPI_UNDEFINED when it is not in `to`).
int translate(MPI_Comm from, int rank, MPI_Comm to) {
  MPI_Group a, b;
  MPI_Comm_group(from, &a);
  MPI_Comm_group(to, &b);
  int out = MPI_UNDEFINED;
  MPI_Group_translate_ranks(a, 1, &rank, b, &out);
  MPI_Group_free(&a);
  MPI_Group_free(&b);
  return out;
}

// Each rank's part of the window: counters on two cache lines (one per writer), then the slots.
//   ready:   the hops this rank is ready to receive (it has finished with the slot the next
//            one lands in): raised by the receiver in start()
//   arrived: the hops that have landed in this rank's slots: raised by the sender
//   posted:  the hops the sender has started (its block is ready): raised by the sender in
//            start(), so that a wait can tell a late neighbour from a slow transfer
struct alignas(64) Flags {
  int64_t ready;
  char pad[56];
  int64_t arrived;
  int64_t posted;
};
constexpr size_t kHeader = 2 * 64;
static_assert(sizeof(Flags) == kHeader);

class Transport : public RingTransport {
 public:
  Transport(CpTransport kind, MPI_Comm comm, int tag, size_t capacity, int slots, int shift)
      : comm_(comm), tag_(tag), capacity_(capacity), slots_(slots) {
    const int size = comm_size(comm), rank = comm_rank(comm);
    shift = ((shift % size) + size) % size;
    next_ = (rank + shift) % size;
    prev_ = (rank + size - shift) % size;
    prev_world_ = translate(comm, prev_, MPI_COMM_WORLD);
    WaitScope w("the set-up of the ring's shared-memory window");
    MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node_);
    const int next_node = translate(comm, next_, node_), prev_node = translate(comm, prev_, node_);
    const bool shm = kind != CpTransport::Mpi && size > 1;
    send_shm_ = shm && next_node != MPI_UNDEFINED;
    recv_shm_ = shm && prev_node != MPI_UNDEFINED;
    // Every rank of the node takes part in the window (collective), even one whose hops
    // both cross nodes.
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true");  // each part on its owner's NUMA node
    char* base = nullptr;
    MPI_Win_allocate_shared(MPI_Aint(kHeader + size_t(slots) * capacity), 1, info, node_, &base, &win_);
    MPI_Info_free(&info);
    MPI_Win_lock_all(MPI_MODE_NOCHECK, win_);
    mine_ = base;
    std::memset(mine_, 0, kHeader);
    MPI_Win_sync(win_);
    MPI_Barrier(node_);  // every part's counters are zero before any rank uses them
    if (send_shm_) {
      MPI_Aint bytes;
      int disp;
      MPI_Win_shared_query(win_, next_node, &bytes, &disp, &next_base_);
    }
  }

  ~Transport() override {
    wait();
    MPI_Win_unlock_all(win_);
    MPI_Win_free(&win_);
    MPI_Comm_free(&node_);
  }

  char* slot(int i) override { return mine_ + kHeader + size_t(i) * capacity_; }
  size_t slot_bytes() const override { return size_t(slots_) * capacity_; }

  void start(const void* send, int to, size_t bytes) override {
    if (bytes > capacity_ || to < 0 || to >= slots_)
      fail("ring: a block of ", bytes, " bytes for slot ", to, " of ", slots_, " of ", capacity_);
    if (!recv_shm_ || !send_shm_) {
      if (bytes > size_t(INT_MAX))
        fail("ring message of ", bytes, " bytes exceeds MPI's 2 GiB count limit; use more cp ranks");
    }
    hop_ += 1;
    if (recv_shm_) {
      // Slot `to` is free: the previous rank may write hop `hop_` into it.
      __atomic_store_n(&flags(mine_)->ready, hop_, __ATOMIC_RELEASE);
    } else {
      MPI_Irecv(slot(to), int(bytes), MPI_BYTE, prev_, tag_, comm_, &req_[0]);
    }
    // Test hook (stallring, common/fault.hpp): stop for good in the middle of the exchange,
    // after announcing the slot free, as a rank that dies or stalls here would: the
    // neighbours must be caught by the watchdog, not hang.
    if (fault_stalls_ring())
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    if (send_shm_) {
      pending_ = {static_cast<const char*>(send), to, bytes};
      __atomic_store_n(&flags(next_base_)->posted, hop_, __ATOMIC_RELEASE);
    } else {
      MPI_Isend(send, int(bytes), MPI_BYTE, next_, tag_, comm_, &req_[1]);
    }
    counters.bytes_sent += bytes;
    if (send_shm_) counters.bytes_sent_shm += bytes;
    progress();
  }

  void progress() override {
    if (pending_.send && __atomic_load_n(&flags(next_base_)->ready, __ATOMIC_ACQUIRE) >= hop_) {
      std::memcpy(next_base_ + kHeader + size_t(pending_.to) * capacity_, pending_.send, pending_.bytes);
      __atomic_store_n(&flags(next_base_)->arrived, hop_, __ATOMIC_RELEASE);
      pending_ = {};
    }
    if (!send_shm_ || !recv_shm_) {
      int done;
      MPI_Testall(2, req_, &done, MPI_STATUSES_IGNORE);
    }
  }

  void wait() override {
    const auto landed = [&] {
      return !recv_shm_ || __atomic_load_n(&flags(mine_)->arrived, __ATOMIC_ACQUIRE) >= hop_;
    };
    if (!pending_.send && landed()) return finish_mpi();
    WaitScope w("the context-parallel ring transfer (K/V or dK/dV)", prev_world_);
    // Our own copy to the next rank first (it may be waiting on it), then the arrival. Until
    // both neighbours have started this hop the wait is theirs (a slower rank), not the
    // transfer's: that part is counted in counters.peer_wait_s.
    const double t0 = MPI_Wtime();
    double late_until = t0;
    for (int spins = 0; pending_.send || !landed(); ++spins) {
      progress();
      if (neighbour_late()) late_until = MPI_Wtime();
      if (spins < 256)
        _mm_pause();
      else
        sched_yield();  // a rank that shares its core (tests) lets the other run
    }
    counters.peer_wait_s += late_until - t0;
    finish_mpi();
  }

  bool sends_shm() const override { return send_shm_; }

  std::string describe() const override {
    return cat(send_shm_ ? "shm" : "mpi", " to rank ", next_, ", ", recv_shm_ ? "shm" : "mpi",
               " from rank ", prev_);
  }

 private:
  static Flags* flags(char* part) { return reinterpret_cast<Flags*>(part); }
  // A shared-memory neighbour has not started our current hop yet: the next rank has not
  // freed the slot our block goes to, or the previous one has no block for us yet.
  bool neighbour_late() const {
    return (pending_.send && __atomic_load_n(&flags(next_base_)->ready, __ATOMIC_ACQUIRE) < hop_) ||
           (recv_shm_ && __atomic_load_n(&flags(mine_)->posted, __ATOMIC_ACQUIRE) < hop_);
  }
  void finish_mpi() {
    if (send_shm_ && recv_shm_) return;
    WaitScope w("the context-parallel ring transfer (K/V or dK/dV)", prev_world_);
    MPI_Waitall(2, req_, MPI_STATUSES_IGNORE);
  }

  struct Pending {
    const char* send = nullptr;
    int to = 0;
    size_t bytes = 0;
  };
  MPI_Comm comm_, node_ = MPI_COMM_NULL;
  int tag_, next_, prev_, prev_world_ = -1;
  size_t capacity_;
  int slots_;
  bool send_shm_ = false, recv_shm_ = false;
  MPI_Win win_ = MPI_WIN_NULL;
  char* mine_ = nullptr;       // this rank's part of the window
  char* next_base_ = nullptr;  // the next rank's part (shared-memory sends only)
  int64_t hop_ = 0;            // hops started by this rank
  Pending pending_;            // a shared-memory copy not yet made (the next rank was busy)
  MPI_Request req_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
};

}  // namespace

std::unique_ptr<RingTransport> make_ring_transport(CpTransport kind, MPI_Comm comm, int tag,
                                                   size_t capacity, int slots, int shift) {
  return std::make_unique<Transport>(kind, comm, tag, capacity, slots, shift);
}

std::string ring_hops(const RingTransport& t, MPI_Comm comm) {
  const int n = comm_size(comm);
  const std::vector<double> shm = allgather({t.sends_shm() ? 1.0 : 0.0}, comm, "the ring's hop list");
  std::string mpi_hops;
  int shm_hops = 0;
  for (int r = 0; r < n; ++r) {
    if (shm[size_t(r)] > 0) ++shm_hops;
    else mpi_hops += cat(mpi_hops.empty() ? "" : ", ", r, "->", (r + 1) % n);
  }
  if (mpi_hops.empty()) return cat(n, " hops, all shm");
  if (shm_hops == 0) return cat(n, " hops, all mpi");
  return cat(n, " hops: ", shm_hops, " shm, ", n - shm_hops, " mpi (", mpi_hops, ")");
}


double timed_hop(RingTransport& ring, const void* send, size_t bytes, MPI_Comm comm, bool slowest) {
  MPI_Barrier(comm);
  const double t0 = MPI_Wtime();
  ring.start(send, 0, bytes);
  ring.wait();
  double dt = MPI_Wtime() - t0;
  if (slowest) MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, comm);
  return dt;
}

}  // namespace lct
