#include "parallel/tp_comm_mpi.hpp"

#include <algorithm>
#include <climits>
#include <vector>

namespace lct {

MpiTpComm::MpiTpComm(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(comm_, &rank_);
}

void MpiTpComm::all_reduce(float* x, int64_t n, MPI_Op op) {
  if (size_ == 1) return;
  // In pieces below INT_MAX elements. Float sum and max are commutative, so Open MPI's
  // algorithms leave the same bits on every rank.
  for (int64_t i = 0; i < n; i += INT_MAX / 2) {
    const int count = int(std::min<int64_t>(INT_MAX / 2, n - i));
    MPI_Allreduce(MPI_IN_PLACE, x + i, count, MPI_FLOAT, op, comm_);
  }
  // What a ring all-reduce sends per rank: 2 (p - 1) / p of the data.
  bytes_ += size_t(2 * (size_ - 1)) * size_t(n) * sizeof(float) / size_t(size_);
}

void MpiTpComm::all_reduce_sum(float* x, int64_t n) { all_reduce(x, n, MPI_SUM); }
void MpiTpComm::all_reduce_max(float* x, int64_t n) { all_reduce(x, n, MPI_MAX); }

double MpiTpComm::sum(double local) {
  if (size_ == 1) return local;
  std::vector<double> all(static_cast<size_t>(size_));
  MPI_Allgather(&local, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, comm_);
  bytes_ += sizeof(double) * size_t(size_ - 1);
  double s = 0;
  for (double v : all) s += v;
  return s;
}

}  // namespace lct
