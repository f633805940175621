#include "parallel/zero3.hpp"

#include <algorithm>
#include <climits>
#include <cstring>

#include "common/knobs.hpp"
#include "common/error.hpp"
#include "parallel/watchdog.hpp"
#include "parallel/world.hpp"
#include "train/optimizer.hpp"

namespace lct {

namespace {
size_t largest_unit(const std::vector<size_t>& units) {
  size_t m = 0;
  for (size_t u = 0; u + 1 < units.size(); ++u) m = std::max(m, units[u + 1] - units[u]);
  return m;
}
}  // namespace

MpiParamShards::MpiParamShards(MPI_Comm comm, const ParamLayout& layout, const ModelConfig& config)
    : units_(unit_bounds(layout, config)), max_unit_(largest_unit(units_)) {
  MPI_Comm_dup(comm, &comm_);
  rank_ = comm_rank(comm_);
  ranks_ = comm_size(comm_);
  if (max_unit_ > size_t(INT_MAX))
    fail(knob_name(Knob::Zero), " 3: a unit of ", max_unit_, " parameters exceeds MPI's int counts; use ", knob_name(Knob::Zero), " 2");
  size_t local = 0;
  for (size_t u = 0; u + 1 < units_.size(); ++u) {
    // Each unit split over the ranks in whole 64-float lines, so a gather is one
    // contiguous piece per rank.
    const std::vector<size_t> b = shard_bounds(units_[u + 1] - units_[u], ranks_);
    counts_.emplace_back();
    displs_.emplace_back();
    for (int r = 0; r < ranks_; ++r) {
      counts_.back().push_back(int(b[size_t(r) + 1] - b[size_t(r)]));
      displs_.back().push_back(int(b[size_t(r)]));
    }
    local_.push_back(local);
    pieces_.push_back({units_[u] + b[size_t(rank_)], units_[u] + b[size_t(rank_) + 1]});
    local += pieces_.back().size();
  }
  params_ = Buffer<float>(local);
  grads_ = Buffer<float>(local);
  size_t piece = 0;
  for (const auto& c : counts_) piece = std::max(piece, size_t(*std::max_element(c.begin(), c.end())));
  recv_ = Buffer<float>(piece);
}

MpiParamShards::~MpiParamShards() {
  for (auto& s : gathered_)
    if (s->req != MPI_REQUEST_NULL) MPI_Wait(&s->req, MPI_STATUS_IGNORE);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

size_t MpiParamShards::bytes_for(const ParamLayout& layout, const ModelConfig& config, int ranks) {
  const std::vector<size_t> units = unit_bounds(layout, config);
  size_t shard = 0, piece = 0;  // the largest rank's (rank 0's: shard_bounds rounds up)
  for (size_t u = 0; u + 1 < units.size(); ++u) {
    const std::vector<size_t> b = shard_bounds(units[u + 1] - units[u], ranks);
    shard += b[1] - b[0];
    piece = std::max(piece, b[1] - b[0]);
  }
  const size_t slots = (config.tie_word_embeddings ? 5 : 3) + 1;  // + MPI's scratch
  return (2 * shard + slots * largest_unit(units) + piece) * sizeof(float);
}

MpiParamShards::Slot* MpiParamShards::find(std::vector<std::unique_ptr<Slot>>& slots, int u) {
  for (auto& s : slots)
    if (s->unit == u) return s.get();
  return nullptr;
}

MpiParamShards::Slot& MpiParamShards::take(std::vector<std::unique_ptr<Slot>>& slots, int u) {
  Slot* s = find(slots, -1);
  if (!s) {
    slots.push_back(std::make_unique<Slot>());
    s = slots.back().get();
    s->buf = Buffer<float>(max_unit_);
  }
  s->unit = u;
  return *s;
}

void MpiParamShards::start_gather(int u) {
  Slot& s = take(gathered_, u);
  const size_t su = size_t(u);
  MPI_Iallgatherv(params_.data() + local_[su], counts_[su][size_t(rank_)], MPI_FLOAT, s.buf.data(),
                  counts_[su].data(), displs_[su].data(), MPI_FLOAT, comm_, &s.req);
  bytes_sent_ += size_t(counts_[su][size_t(rank_)]) * sizeof(float) * size_t(ranks_ - 1);
}

float* MpiParamShards::acquire(int u, int next) {
  Slot* s = find(gathered_, u);
  if (!s) {
    start_gather(u);
    s = find(gathered_, u);
  }
  if (s->req != MPI_REQUEST_NULL) {
    WaitScope w("the ZeRO-3 all-gather of a unit's parameters");
    MPI_Wait(&s->req, MPI_STATUS_IGNORE);
  }
  // Posted now, it may move while u computes (see the header on how much it does).
  if (next >= 0 && !find(gathered_, next)) start_gather(next);
  return s->buf.data();
}

void MpiParamShards::release(int u) {
  Slot* s = find(gathered_, u);
  if (!s) fail("ZeRO-3: release of unit ", u, ", which is not gathered");
  if (s->req != MPI_REQUEST_NULL) {
    WaitScope w("the ZeRO-3 all-gather of a unit's parameters");
    MPI_Wait(&s->req, MPI_STATUS_IGNORE);
  }
  s->unit = -1;
}

float* MpiParamShards::grads(int u) {
  if (Slot* s = find(grad_slots_, u)) return s->buf.data();  // tied: the head's, for the embedding
  Slot& s = take(grad_slots_, u);
  std::memset(s.buf.data(), 0, (units_[size_t(u) + 1] - units_[size_t(u)]) * sizeof(float));
  return s.buf.data();
}

void MpiParamShards::grads_done(int u) {
  Slot* s = find(grad_slots_, u);
  if (!s) fail("ZeRO-3: gradients of unit ", u, " handed back without a buffer");
  const size_t su = size_t(u);
  const int n = counts_[su][size_t(rank_)];
  {
    WaitScope w("the ZeRO-3 reduce-scatter of a unit's gradients");
    MPI_Reduce_scatter(s->buf.data(), recv_.data(), counts_[su].data(), MPI_FLOAT, MPI_SUM, comm_);
  }
  bytes_sent_ += size_t(units_[su + 1] - units_[su] - size_t(n)) * sizeof(float);  // the others' pieces
  float* g = grads_.data() + local_[su];  // micro-batches add up here
  const float* r = recv_.data();
#pragma omp parallel for simd schedule(static)
  for (int i = 0; i < n; ++i) g[i] += r[i];
  s->unit = -1;
}

void MpiParamShards::gather_whole(const float* shard, float* whole) {
  WaitScope w("the ZeRO-3 all-gather of a whole array for a checkpoint");
  for (size_t u = 0; u < local_.size(); ++u)
    MPI_Allgatherv(shard + local_[u], counts_[u][size_t(rank_)], MPI_FLOAT, whole + units_[u],
                   counts_[u].data(), displs_[u].data(), MPI_FLOAT, comm_);
}

void MpiParamShards::take_mine(const float* whole, float* shard) const {
  for (size_t u = 0; u < pieces_.size(); ++u)
    std::copy(whole + pieces_[u].begin, whole + pieces_[u].end, shard + local_[u]);
}

}  // namespace lct
