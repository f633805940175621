// ZeRO-3 (FSDP) over MPI: each rank keeps its piece of every unit (the embedding, each
// layer, the head; unit_bounds() in model/params.hpp) of the parameters and of their
// gradients. acquire() all-gathers a unit into a working buffer (MPI_Iallgatherv; the next
// unit's gather is posted before the current unit computes), grads_done() reduce-scatters
// a unit's gradients (MPI_Reduce_scatter, blocking) and adds this rank's piece to the shard.
//
// Overlap: nothing calls MPI while the kernels run, so a posted gather progresses only as
// far as the MPI library moves it on its own (on one node with shared memory, little: the
// copies happen inside the wait or the next blocking call: docs/zero.md,
// measured no real overlap). The passes count acquire() and grads_done() as Allreduce time.
#pragma once
#include <mpi.h>

#include <memory>
#include <vector>

#include "model/param_shards.hpp"
#include "sys/memory.hpp"

namespace lct {

class MpiParamShards final : public ParamShards {
 public:
  MpiParamShards(MPI_Comm comm, const ParamLayout& layout, const ModelConfig& config);
  ~MpiParamShards() override;
  MpiParamShards(const MpiParamShards&) = delete;
  MpiParamShards& operator=(const MpiParamShards&) = delete;

  // Bytes one of `ranks` ranks holds: its shard of the parameters and gradients, and the
  // working buffers (two gathered units and one unit's gradients at a time, one more of
  // each with tied embeddings, whose unit 0 is also the LM head), each the largest unit,
  // with the scratch MPI allocates for a reduce-scatter (measured with Open MPI: a unit).
  static size_t bytes_for(const ParamLayout& layout, const ModelConfig& config, int ranks);

  float* acquire(int u, int next) override;
  void release(int u) override;
  float* grads(int u) override;
  void grads_done(int u) override;
  const std::vector<Shard>& pieces() const override { return pieces_; }
  size_t size() const override { return params_.size(); }
  float* params() override { return params_.data(); }
  float* grad_shard() override { return grads_.data(); }
  void gather_whole(const float* shard, float* whole) override;
  void take_mine(const float* whole, float* shard) const override;

  size_t bytes_sent() const override { return bytes_sent_; }

 private:
  struct Slot {  // a working buffer of the largest unit's size
    Buffer<float> buf;
    int unit = -1;  // -1: free
    MPI_Request req = MPI_REQUEST_NULL;
  };
  Slot* find(std::vector<std::unique_ptr<Slot>>& slots, int u);
  Slot& take(std::vector<std::unique_ptr<Slot>>& slots, int u);
  void start_gather(int u);

  MPI_Comm comm_ = MPI_COMM_NULL;  // a duplicate: its collectives never meet the trainer's
  int rank_ = 0, ranks_ = 1;
  std::vector<size_t> units_;                    // unit_bounds(): L + 3 entries
  std::vector<std::vector<int>> counts_, displs_;  // per unit, per rank: its piece, in the unit
  std::vector<size_t> local_;                    // per unit: where this rank's piece starts in the shard
  std::vector<Shard> pieces_;                    // this rank's pieces of the flat layout
  size_t max_unit_ = 0;
  size_t bytes_sent_ = 0;
  Buffer<float> params_, grads_, recv_;  // shard [size], shard [size], largest piece
  std::vector<std::unique_ptr<Slot>> gathered_, grad_slots_;
};

}  // namespace lct
