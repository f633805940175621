// Ring permute between the ranks of a communicator: every rank sends a block to the next rank
// and receives the previous rank's. Knows nothing of what the bytes are.
//
// The transport owns the memory a hop lands in: two receive slots of `capacity` bytes. A
// sender names the slot its block goes to (`to`); every rank receives into its own slot of
// the same number. That shape lets a shared-memory transport write a block straight into the
// neighbour's slot (one copy per hop) while the two-sided one receives into it.
//   mpi  two-sided MPI (Irecv into the slot, Isend), any placement of the ranks
//   shm  hops between ranks of one node through an MPI-3 shared-memory window (the sender
//        copies into the receiver's slot, flags in the window say when a slot is free and
//        when it is full); hops between nodes through two-sided MPI as above
#pragma once
#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>

#include "parallel/parallel_plan.hpp"  // CpTransport
#include "sys/memory.hpp"

namespace lct {

// What a transport has done since construction; sums over several transports with +=.
struct RingCounters {
  size_t bytes_sent = 0;
  size_t bytes_sent_shm = 0;  // of which through shared memory
  // Of the seconds blocked in wait(), those before both neighbours had started the hop:
  // waiting for a slower rank, not for the transfer. Shared-memory hops only (their flags
  // show it); a wait on an MPI hop counts as transfer whatever its cause.
  double peer_wait_s = 0;
  RingCounters& operator+=(const RingCounters& o) {
    bytes_sent += o.bytes_sent;
    bytes_sent_shm += o.bytes_sent_shm;
    peer_wait_s += o.peer_wait_s;
    return *this;
  }
};

class RingTransport {
 public:
  virtual ~RingTransport() = default;
  virtual char* slot(int i) = 0;  // i < slots: where hops land, `capacity` bytes each
  // Sends `bytes` of `send` to the next rank's slot `to` and receives the previous rank's
  // block into our slot `to`. `send` must stay readable, and slot `to` unread, until wait().
  virtual void start(const void* send, int to, size_t bytes) = 0;
  virtual void progress() = 0;  // lets the transfer advance; cheap, callable any time
  virtual void wait() = 0;      // until both the send and the receive are complete
  virtual std::string describe() const = 0;  // "shm to rank 1, shm from rank 3"
  virtual bool sends_shm() const = 0;        // this rank's hop goes through shared memory
  virtual size_t slot_bytes() const = 0;     // slots x capacity: the memory hops land in
  RingCounters counters;
};

// Collective over `comm`. Auto: shared memory for the hops whose two ranks share a node.
// `slots`: 2, or 1 for a ring whose blocks always land in slot 0. `shift`: every rank r
// sends to r + shift and receives from r - shift (mod size); 1 is the ring.
std::unique_ptr<RingTransport> make_ring_transport(CpTransport kind, MPI_Comm comm, int tag,
                                                   size_t capacity, int slots = 2, int shift = 1);

// Every hop of the ring and its transport, collective over `comm`: "4 hops, all shm", or
// "4 hops: 2 shm, 2 mpi (1->2, 3->0)" naming the MPI ones (ranks of `comm`).
std::string ring_hops(const RingTransport& t, MPI_Comm comm);


// One timed hop for `bench ring`: every rank of `comm` starts together (a barrier), sends
// `bytes` to the next and receives from the previous. Seconds on this rank, or the slowest
// rank's when `slowest`.
double timed_hop(RingTransport& ring, const void* send, size_t bytes, MPI_Comm comm, bool slowest);

}  // namespace lct
