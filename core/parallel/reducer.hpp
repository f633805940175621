// The trainer's sums over the ranks of a communicator: counts, the loss, and the gradients
// in buckets (non-blocking allreduces, all in flight at once).
#pragma once
#include <mpi.h>

#include <vector>

#include "common/bf16.hpp"

#include "train/grad_sync.hpp"

namespace lct {

// `wire` bf16: gradients travel (and are summed, in fp32 pairwise then rounded) as bf16,
// half the bytes; they are accumulated and applied in fp32 either way.
//
// Hierarchical (when asked for, and the ranks of `comm` sit on several nodes, the same number
// on each): the gradient all-reduce runs in three stages, each bucket a reduce-scatter among
// the node's ranks (shared memory), an all-reduce of the rank's 1/L of it with the ranks of
// the same place on the other nodes (the links), and an all-gather back among the node's
// ranks. Each node's link then carries 2 (N-1)/N of the gradients for N nodes, where a flat
// ring over the N x L ranks, each on its own edge, carries 2 (NL-1)/(NL). The sums' order
// differs from the flat one: the same on every rank and every run of one layout.
// `nodes`: the node each rank is on, as a communicator of one node's ranks (null: found
// with MPI_COMM_TYPE_SHARED; tests pass their own to make nodes on one host).
class MpiStepReducer : public StepReducer {
 public:
  static constexpr size_t kBucketFloats = size_t(1) << 22;
  explicit MpiStepReducer(MPI_Comm comm, Precision wire = Precision::Fp32,
                          size_t bucket_floats = kBucketFloats, bool hierarchical = false,
                          MPI_Comm nodes = MPI_COMM_NULL);
  bool hierarchical() const { return node_ != MPI_COMM_NULL; }
  // Bytes an all-reduce (sum_gradients) and a reduce-scatter (scatter_gradients) of n
  // gradients hold besides them: the bf16 copy on the wire, the receive buffer, and the
  // scratch MPI allocates for a reduction (with Open MPI, measured: the size of what is in
  // flight - every bucket of the all-reduce, one of the reduce-scatter).
  static size_t allreduce_scratch_bytes(size_t n, Precision wire);
  static size_t reduce_scatter_scratch_bytes(size_t n, Precision wire);
  ~MpiStepReducer() override;
  int64_t sum(int64_t local) override;
  double sum(double local) override;
  void sum_gradients(float* grads, size_t n) override;
  void gather_shards(float* x, const std::vector<size_t>& bounds) override;
  void scatter_gradients(float* g, const std::vector<size_t>& bounds) override;
  double sum_in_order(double local) override;
  size_t bytes_sent = 0;

 private:
  void sum_gradients_flat(void* g, size_t n, MPI_Datatype type, MPI_Op op, size_t elem);
  void sum_gradients_hierarchical(void* g, size_t n, MPI_Datatype type, MPI_Op op, size_t elem);
  MPI_Comm node_ = MPI_COMM_NULL, cross_ = MPI_COMM_NULL;  // hierarchical: this node's ranks; this place's on every node
  MPI_Comm comm_;
  Precision wire_;
  size_t bucket_;
  std::vector<bf16> wire_buf_;  // the gradients as bf16 while they travel
  std::vector<float> recv_;     // ZeRO-2: this rank's range of the sum, before it is copied in place
  std::vector<bf16> recv16_;
  MPI_Datatype bf16_type_ = MPI_DATATYPE_NULL;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
};

}  // namespace lct
