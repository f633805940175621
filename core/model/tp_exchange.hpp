// The passes' tensor-parallel exchanges over a [n, C] stream (the residual stream and the
// gradients flowing into it). Without sequence parallelism every rank of the tp group holds
// all n rows, and a partial sum (a row-parallel product's output, a column-parallel input
// gradient) is all-reduced. With it (Megatron's sequence parallelism), rank r holds rows
// [r n/tp, (r + 1) n/tp) of the residual stream, its norms and their activations: a partial
// sum is reduce-scattered to those rows, and a norm's output, or the residual gradient a
// product needs whole, is all-gathered from them. The norm weights' gradients then come from
// a rank's rows only and are summed over the group once per micro-batch.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/clock.hpp"
#include "kernels/tp_comm.hpp"

namespace lct {

class TpExchange {
 public:
  TpExchange(TpComm* tp, bool sequence_parallel, int64_t C)
      : tp_(tp), sp_(tp && sequence_parallel), C_(C) {}
  bool sequence_parallel() const { return sp_; }
  int64_t rows(int64_t n) const { return sp_ ? n / tp_->size() : n; }  // of the residual stream
  int64_t first_row(int64_t n) const { return sp_ ? rows(n) * tp_->rank() : 0; }

  // x [n, C], partial over the group: the whole sum (all-reduce), or this rank's rows of it at
  // x (reduce-scatter).
  void sum(float* x, int64_t n, PhaseClock& clock) {
    if (!tp_) return;
    if (sp_) tp_->reduce_scatter_sum(x, rows(n) * C_);
    else tp_->all_reduce_sum(x, n * C_);
    clock.lap(Phase::Allreduce);
  }
  // x [n, C], this rank's rows at first_row(n): every rank's (sequence-parallel only).
  template <class T>
  void gather(T* x, int64_t n, PhaseClock& clock) {
    if (!sp_) return;
    tp_->all_gather(x, size_t(rows(n) * C_) * sizeof(T));
    clock.lap(Phase::Allreduce);
  }
  // mine [rows(n), C] as the whole [n, C]: gathered into buf, or mine itself without
  // sequence parallelism.
  float* whole_rows(float* mine, float* buf, int64_t n, PhaseClock& clock) {
    if (!sp_) return mine;
    std::copy(mine, mine + rows(n) * C_, buf + first_row(n) * C_);
    gather(buf, n, clock);
    return buf;
  }

  // Sequence-parallel: around a micro-batch's backward, the norm weights' gradients g (C each)
  // get the group's sum of what it added (each rank's rows' part), so that they stay alike
  // on every rank (micro-batches before it already summed).
  void norm_grads_begin(const std::vector<float*>& g) {
    if (!sp_) return;
    before_.resize(g.size() * size_t(C_));
    for (size_t i = 0; i < g.size(); ++i) std::copy(g[i], g[i] + C_, before_.data() + i * size_t(C_));
  }
  void norm_grads_end(const std::vector<float*>& g, PhaseClock& clock) {
    if (!sp_) return;
    std::vector<float> added(before_.size());  // [g.size(), C] what this micro-batch added
    for (size_t i = 0; i < g.size(); ++i)
      for (int64_t c = 0; c < C_; ++c) added[i * size_t(C_) + size_t(c)] = g[i][c] - was(i)[c];
    tp_->all_reduce_sum(added.data(), int64_t(added.size()));
    for (size_t i = 0; i < g.size(); ++i)
      for (int64_t c = 0; c < C_; ++c) g[i][c] = was(i)[c] + added[i * size_t(C_) + size_t(c)];
    clock.lap(Phase::Allreduce);
  }

 private:
  const float* was(size_t i) const { return before_.data() + i * size_t(C_); }
  TpComm* tp_;
  bool sp_;
  int64_t C_;
  std::vector<float> before_;
};

}  // namespace lct
