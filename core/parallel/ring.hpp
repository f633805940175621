// Ring permute between the ranks of a communicator: send a buffer to the next rank, receive
// the previous rank's into another. Knows nothing of what the bytes are. The interface is
// small so that a zero-copy transport (ranks of one node reading each other's buffers in
// an MPI shared-memory window) can replace the two-sided one.
#pragma once
#include <mpi.h>

#include <cstddef>

namespace lct {

class RingTransport {
 public:
  virtual ~RingTransport() = default;
  virtual void start(const void* send, void* recv, size_t bytes) = 0;
  virtual void progress() = 0;  // lets the transfer advance; cheap, callable any time
  virtual void wait() = 0;      // until both the send and the receive are complete
  size_t bytes_sent = 0;        // since construction
};

// Non-blocking two-sided MPI: receive posted first, then send; MPI_Testall to progress.
class MpiRingTransport : public RingTransport {
 public:
  MpiRingTransport(MPI_Comm comm, int tag);
  ~MpiRingTransport() override;
  void start(const void* send, void* recv, size_t bytes) override;
  void progress() override;
  void wait() override;

 private:
  MPI_Comm comm_;
  int tag_, next_, prev_;
  int prev_world_ = -1;  // prev_ in MPI_COMM_WORLD, for the watchdog's message
  MPI_Request req_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
};

// One timed hop for `bench ring`: every rank of `comm` starts together (a barrier), sends
// `bytes` to the next and receives from the previous. Seconds on this rank, or the slowest
// rank's when `slowest`.
double timed_hop(RingTransport& ring, const void* send, void* recv, size_t bytes, MPI_Comm comm,
                 bool slowest);

}  // namespace lct
