// The trainer's sums over the ranks of a communicator: counts, the loss, and the gradients
// in buckets (non-blocking allreduces, all in flight at once).
#pragma once
#include <mpi.h>

#include "train/trainer.hpp"

namespace lct {

class MpiStepReducer : public StepReducer {
 public:
  explicit MpiStepReducer(MPI_Comm comm, size_t bucket_floats = size_t(1) << 22)
      : comm_(comm), bucket_(bucket_floats) {}
  int64_t sum(int64_t local) override;
  double sum(double local) override;
  void sum_gradients(float* grads, size_t n) override;
  size_t bytes_sent = 0;

 private:
  MPI_Comm comm_;
  size_t bucket_;
};

}  // namespace lct
