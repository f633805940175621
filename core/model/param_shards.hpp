// ZeRO-3 (FSDP) as the model sees it: no rank holds the whole parameters. Each rank keeps
// its piece of every unit (unit_bounds() in params.hpp: the embedding, each layer, the
// head) and the gradients of those pieces; the passes ask for a unit's whole parameters
// just before they compute with it and hand its gradients back just after. The
// communication behind this (all-gathers, reduce-scatters) lives in core/parallel
// (parallel/zero3.hpp); the model never calls MPI itself.
#pragma once
#include <cstddef>
#include <vector>

#include "common/clock.hpp"
#include "model/config.hpp"
#include "model/params.hpp"

namespace lct {

class ParamShards {
 public:
  virtual ~ParamShards() = default;

  // Unit u's whole parameters (its range of the flat layout, from unit_bounds()[u]), valid
  // until release(u). `next` (-1: none) is the unit the pass will acquire after u: its
  // gather may start now, to overlap with the computation on u.
  virtual float* acquire(int u, int next) = 0;
  virtual void release(int u) = 0;
  // A zeroed buffer for unit u's gradients (its range), valid until grads_done(u), which
  // sums it over the ranks and adds this rank's piece of the sum to grad_shard().
  virtual float* grads(int u) = 0;
  virtual void grads_done(int u) = 0;

  // This rank's shard: its piece of every unit, back to back in unit order (pieces()).
  virtual const std::vector<Shard>& pieces() const = 0;
  virtual size_t size() const = 0;  // floats in the shard
  virtual float* params() = 0;      // the fp32 master parameters of the shard
  virtual float* grad_shard() = 0;  // their gradients, summed over the ranks
  // A whole-layout array from every rank's shard of it (collective), and this rank's shard
  // out of a whole one: the parameters and the AdamW moments for checkpoints.
  virtual void gather_whole(const float* shard, float* whole) = 0;
  virtual void take_mine(const float* whole, float* shard) const = 0;
  // Bytes this rank has sent gathering and reduce-scattering (its pieces to the others).
  virtual size_t bytes_sent() const = 0;
};

// The model's weights and gradients unit by unit, as its passes ask for them: views into the
// model's whole arrays, where nothing moves, or (ZeRO-3) the units gathered from the shards
// and handed back. The passes read the same either way, as they do with TpExchange without
// tensor parallelism. Resident gradients accumulate in the whole array; a shard's unit
// gradients start from zero and are added to the shard by grads_done().
class UnitWeights {
 public:
  UnitWeights(ParamShards* shards, const ParamLayout& layout, const ModelConfig& config, float* params, float* grads)
      : shards_(shards), units_(unit_bounds(layout, config)), params_(params), grads_(grads) {}
  float* acquire(int u, int next) const { return shards_ ? shards_->acquire(u, next) : params_ + units_[size_t(u)]; }
  void release(int u) const {
    if (shards_) shards_->release(u);
  }
  float* grads(int u) const { return shards_ ? shards_->grads(u) : grads_ + units_[size_t(u)]; }
  void grads_done(int u) const {
    if (shards_) shards_->grads_done(u);
  }
  // The time since the clock's last lap, as communication (ZeRO-3's gathers and reductions).
  void lap(PhaseClock& clock) const {
    if (shards_) clock.lap(Phase::Allreduce);
  }

 private:
  ParamShards* shards_;
  std::vector<size_t> units_;  // unit_bounds()
  float *params_, *grads_;     // the whole arrays (null under ZeRO-3)
};

}  // namespace lct
