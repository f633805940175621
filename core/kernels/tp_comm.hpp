// Tensor parallelism (Megatron) as the model sees it: the sums and maxima over the ranks of
// one tp group, which hold the same tokens and each a slice of every weight matrix (tp.hpp).
// The communication behind it lives in core/parallel (parallel/tp_comm_mpi.hpp); the model
// never calls MPI itself. It sits in kernels/ because the vocabulary-parallel loss
// (kernels/xent.cpp) sums through it, and kernels come below the model (docs/layout.md).
#pragma once
#include <cstddef>
#include <cstdint>

namespace lct {

class TpComm {
 public:
  virtual ~TpComm() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;  // this rank's index in the tp group
  // In place over the group: every rank ends with the same bits.
  virtual void all_reduce_sum(float* x, int64_t n) = 0;
  virtual void all_reduce_max(float* x, int64_t n) = 0;
  // Sequence parallelism. x holds size() parts of n floats: afterwards its first n floats are
  // the sum over the group of this rank's part (rank r: part r); the rest is left undefined.
  virtual void reduce_scatter_sum(float* x, int64_t n) = 0;
  // x holds size() parts of `bytes` each, this rank's at part rank(): afterwards every part,
  // from its rank.
  virtual void all_gather(void* x, size_t bytes) = 0;
  // The sum of one value per rank, added in rank order: the same bits on every rank.
  virtual double sum(double local) = 0;
  // Bytes this rank has sent since construction.
  virtual size_t bytes_sent() const = 0;
};

}  // namespace lct
