// The tp group's sums and maxima over MPI (model/tp_comm.hpp): the tp axis of the mesh.
#pragma once
#include <mpi.h>

#include "kernels/tp_comm.hpp"

namespace lct {

class MpiTpComm : public TpComm {
 public:
  explicit MpiTpComm(MPI_Comm comm);  // not owned
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  void all_reduce_sum(float* x, int64_t n) override;
  void all_reduce_max(float* x, int64_t n) override;
  void reduce_scatter_sum(float* x, int64_t n) override;
  void all_gather(void* x, size_t bytes) override;
  double sum(double local) override;
  size_t bytes_sent() const override { return bytes_; }

 private:
  void all_reduce(float* x, int64_t n, MPI_Op op);
  MPI_Comm comm_;
  int size_ = 1, rank_ = 0;
  size_t bytes_ = 0;
};

}  // namespace lct
