#include "parallel/ring.hpp"

#include <climits>

#include "common/error.hpp"
#include "parallel/watchdog.hpp"

namespace lct {

MpiRingTransport::MpiRingTransport(MPI_Comm comm, int tag) : comm_(comm), tag_(tag) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  next_ = (rank + 1) % size;
  prev_ = (rank + size - 1) % size;
  MPI_Group group, world;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  MPI_Group_translate_ranks(group, 1, &prev_, world, &prev_world_);
  MPI_Group_free(&group);
  MPI_Group_free(&world);
}

MpiRingTransport::~MpiRingTransport() { wait(); }

void MpiRingTransport::start(const void* send, void* recv, size_t bytes) {
  if (bytes > size_t(INT_MAX))
    fail("ring message of ", bytes, " bytes exceeds MPI's 2 GiB count limit; use more cp ranks");
  MPI_Irecv(recv, int(bytes), MPI_BYTE, prev_, tag_, comm_, &req_[0]);
  MPI_Isend(send, int(bytes), MPI_BYTE, next_, tag_, comm_, &req_[1]);
  bytes_sent += bytes;
}

void MpiRingTransport::progress() {
  int done;
  MPI_Testall(2, req_, &done, MPI_STATUSES_IGNORE);
}

void MpiRingTransport::wait() {
  WaitScope w("the context-parallel ring transfer (K/V or dK/dV)", prev_world_);
  MPI_Waitall(2, req_, MPI_STATUSES_IGNORE);
}

double timed_hop(RingTransport& ring, const void* send, void* recv, size_t bytes, MPI_Comm comm,
                 bool slowest) {
  MPI_Barrier(comm);
  const double t0 = MPI_Wtime();
  ring.start(send, recv, bytes);
  ring.wait();
  double dt = MPI_Wtime() - t0;
  if (slowest) MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, comm);
  return dt;
}

}  // namespace lct
