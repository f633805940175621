#include "parallel/tp_comm_mpi.hpp"

#include <algorithm>
#include <climits>
#include <vector>

#include "common/error.hpp"
#include "parallel/watchdog.hpp"

namespace lct {

MpiTpComm::MpiTpComm(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(comm_, &rank_);
}

void MpiTpComm::all_reduce(float* x, int64_t n, MPI_Op op) {
  if (size_ == 1) return;
  // In pieces below INT_MAX elements. Float sum and max are commutative, so Open MPI's
  // algorithms leave the same bits on every rank.
  WaitScope w(op == MPI_MAX ? "the tensor-parallel all-reduce (max)" : "the tensor-parallel all-reduce");
  for (int64_t i = 0; i < n; i += INT_MAX / 2) {
    const int count = int(std::min<int64_t>(INT_MAX / 2, n - i));
    MPI_Allreduce(MPI_IN_PLACE, x + i, count, MPI_FLOAT, op, comm_);
  }
  // What a ring all-reduce sends per rank: 2 (p - 1) / p of the data.
  bytes_ += size_t(2 * (size_ - 1)) * size_t(n) * sizeof(float) / size_t(size_);
}

void MpiTpComm::all_reduce_sum(float* x, int64_t n) { all_reduce(x, n, MPI_SUM); }
void MpiTpComm::all_reduce_max(float* x, int64_t n) { all_reduce(x, n, MPI_MAX); }

void MpiTpComm::reduce_scatter_sum(float* x, int64_t n) {
  if (size_ == 1) return;
  if (n > INT_MAX) fail("a tp reduce-scatter of ", n, " floats per rank: more than MPI's int count");
  // In place: the input is all of x, this rank's sum lands at its start.
  WaitScope w("the tensor-parallel reduce-scatter");
  MPI_Reduce_scatter_block(MPI_IN_PLACE, x, int(n), MPI_FLOAT, MPI_SUM, comm_);
  bytes_ += size_t(size_ - 1) * size_t(n) * sizeof(float);
}

void MpiTpComm::all_gather(void* x, size_t bytes) {
  if (size_ == 1) return;
  if (bytes > size_t(INT_MAX)) fail("a tp all-gather of ", bytes, " bytes per rank: more than MPI's int count");
  WaitScope w("the tensor-parallel all-gather");
  MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, int(bytes), MPI_BYTE, comm_);
  bytes_ += size_t(size_ - 1) * bytes;
}

double MpiTpComm::sum(double local) {
  if (size_ == 1) return local;
  std::vector<double> all(static_cast<size_t>(size_));
  WaitScope w("the tensor-parallel all-gather of a sum");
  MPI_Allgather(&local, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, comm_);
  bytes_ += sizeof(double) * size_t(size_ - 1);
  double s = 0;
  for (double v : all) s += v;
  return s;
}

}  // namespace lct
