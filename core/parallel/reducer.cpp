#include "parallel/reducer.hpp"

#include <algorithm>
#include <vector>

#include "parallel/watchdog.hpp"

namespace lct {

int64_t MpiStepReducer::sum(int64_t local) {
  int64_t out = 0;
  WaitScope w("the allreduce of the step's token counts");
  MPI_Allreduce(&local, &out, 1, MPI_INT64_T, MPI_SUM, comm_);
  return out;
}

double MpiStepReducer::sum(double local) {
  double out = 0;
  WaitScope w("the allreduce of the step's loss");
  MPI_Allreduce(&local, &out, 1, MPI_DOUBLE, MPI_SUM, comm_);
  return out;
}

void MpiStepReducer::sum_gradients(float* g, size_t n) {
  int size;
  MPI_Comm_size(comm_, &size);
  if (size == 1) return;
  std::vector<MPI_Request> reqs;
  for (size_t off = 0; off < n; off += bucket_) {
    reqs.emplace_back();
    MPI_Iallreduce(MPI_IN_PLACE, g + off, int(std::min(bucket_, n - off)), MPI_FLOAT, MPI_SUM, comm_,
                   &reqs.back());
  }
  WaitScope w("the gradient allreduce");
  MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
  bytes_sent += 2 * n * sizeof(float) * size_t(size - 1) / size_t(size);  // ring allreduce volume
}

}  // namespace lct
