#include "parallel/reducer.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

#include "common/knobs.hpp"
#include "common/error.hpp"
#include "parallel/watchdog.hpp"
#include "parallel/world.hpp"

namespace lct {

namespace {
// MPI reduction of bf16 values: each pair added in fp32, the sum rounded to bf16.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const bf16* a = static_cast<const bf16*>(in);
  bf16* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = to_bf16(to_f32(a[i]) + to_f32(b[i]));
}
}  // namespace

namespace {
// This rank's node (its ranks of `comm`) and its place across the nodes, when the ranks of
// `comm` sit on more than one node with the same number on each, more than one: else nulls.
std::pair<MPI_Comm, MPI_Comm> node_hierarchy(MPI_Comm comm, MPI_Comm nodes) {
  MPI_Comm node = MPI_COMM_NULL, cross = MPI_COMM_NULL;
  const int rank = comm_rank(comm), ranks = comm_size(comm);
  if (nodes == MPI_COMM_NULL) {
    MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  } else {  // the given grouping, restricted to comm's ranks: one color per node, its lowest world rank
    int world = 0, color = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world);
    MPI_Allreduce(&world, &color, 1, MPI_INT, MPI_MIN, nodes);
    MPI_Comm_split(comm, color, rank, &node);
  }
  const int local = comm_rank(node), per = comm_size(node);
  int most[2] = {per, -per};  // the most and (negated) the fewest ranks on a node, in one reduction
  MPI_Allreduce(MPI_IN_PLACE, most, 2, MPI_INT, MPI_MAX, comm);
  if (most[0] != -most[1] || per == 1 || per == ranks) {  // uneven, one rank per node, or one node
    MPI_Comm_free(&node);
    return {MPI_COMM_NULL, MPI_COMM_NULL};
  }
  MPI_Comm_split(comm, local, rank, &cross);
  return {node, cross};
}
}  // namespace

MpiStepReducer::MpiStepReducer(MPI_Comm comm, Precision wire, size_t bucket_floats, bool hierarchical,
                               MPI_Comm nodes)
    : comm_(comm), wire_(wire), bucket_(bucket_floats) {
  if (wire_ == Precision::Bf16) {
    MPI_Type_contiguous(2, MPI_BYTE, &bf16_type_);
    MPI_Type_commit(&bf16_type_);
    MPI_Op_create(bf16_sum, 1, &bf16_sum_);
  }
  if (hierarchical) std::tie(node_, cross_) = node_hierarchy(comm, nodes);
}

MpiStepReducer::~MpiStepReducer() {
  if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
  if (cross_ != MPI_COMM_NULL) MPI_Comm_free(&cross_);
  if (bf16_sum_ != MPI_OP_NULL) MPI_Op_free(&bf16_sum_);
  if (bf16_type_ != MPI_DATATYPE_NULL) MPI_Type_free(&bf16_type_);
}

namespace {
size_t wire_copy_bytes(size_t n, Precision wire) { return wire == Precision::Bf16 ? n * sizeof(bf16) : 0; }
size_t wire_elem_bytes(Precision wire) { return wire == Precision::Bf16 ? sizeof(bf16) : sizeof(float); }
}  // namespace

size_t MpiStepReducer::allreduce_scratch_bytes(size_t n, Precision wire) {
  return wire_copy_bytes(n, wire) + n * wire_elem_bytes(wire);  // every bucket in flight
}

size_t MpiStepReducer::reduce_scatter_scratch_bytes(size_t n, Precision wire) {
  return wire_copy_bytes(n, wire) + 2 * std::min(n, kBucketFloats) * wire_elem_bytes(wire);  // receive + MPI's, a bucket
}

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
  if (comm_size(comm_) == 1) return;
  const bool b16 = wire_ == Precision::Bf16;
  if (b16) {
    wire_buf_.resize(n);
    convert(g, wire_buf_.data(), int64_t(n));
  }
  void* x = b16 ? static_cast<void*>(wire_buf_.data()) : static_cast<void*>(g);
  MPI_Datatype type = b16 ? bf16_type_ : MPI_FLOAT;
  MPI_Op op = b16 ? bf16_sum_ : MPI_SUM;
  const size_t elem = b16 ? sizeof(bf16) : sizeof(float);
  if (hierarchical())
    sum_gradients_hierarchical(x, n, type, op, elem);
  else
    sum_gradients_flat(x, n, type, op, elem);
  if (b16) convert(wire_buf_.data(), g, int64_t(n));
}

void MpiStepReducer::sum_gradients_flat(void* x, size_t n, MPI_Datatype type, MPI_Op op, size_t elem) {
  char* bytes = static_cast<char*>(x);
  std::vector<MPI_Request> reqs;
  for (size_t off = 0; off < n; off += bucket_) {
    reqs.emplace_back();
    MPI_Iallreduce(MPI_IN_PLACE, bytes + off * elem, int(std::min(bucket_, n - off)), type, op, comm_, &reqs.back());
  }
  {
    WaitScope w("the gradient allreduce");
    MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
  }
  const size_t size = size_t(comm_size(comm_));
  bytes_sent += 2 * n * elem * (size - 1) / size;  // ring allreduce volume
}

// Per bucket: reduce-scatter in the node, all-reduce of this rank's part across the nodes,
// all-gather in the node. Every bucket's first stage is posted at once; each later stage is
// posted as the one before it completes, bucket by bucket, so the links and the node's shared
// memory work on different buckets at the same time.
void MpiStepReducer::sum_gradients_hierarchical(void* x, size_t n, MPI_Datatype type, MPI_Op op, size_t elem) {
  char* bytes = static_cast<char*>(x);
  const size_t per = size_t(comm_size(node_)), local = size_t(comm_rank(node_));
  const size_t buckets = (n + bucket_ - 1) / bucket_;
  std::vector<std::vector<int>> counts(buckets), displs(buckets);
  std::vector<MPI_Request> scatter(buckets), across(buckets), gather(buckets);
  for (size_t k = 0; k < buckets; ++k) {
    const size_t off = k * bucket_, len = std::min(bucket_, n - off);
    for (size_t q = 0; q < per; ++q) {  // the node's ranks' parts of the bucket
      counts[k].push_back(int(len * (q + 1) / per - len * q / per));
      displs[k].push_back(int(len * q / per));
    }
    // In place: this rank's part of the node's sum lands at the start of the bucket.
    MPI_Ireduce_scatter(MPI_IN_PLACE, bytes + off * elem, counts[k].data(), type, op, node_, &scatter[k]);
  }
  WaitScope w("the gradient allreduce (inside the node, then across the nodes)");
  for (size_t k = 0; k < buckets; ++k) {
    MPI_Wait(&scatter[k], MPI_STATUS_IGNORE);
    MPI_Iallreduce(MPI_IN_PLACE, bytes + k * bucket_ * elem, counts[k][local], type, op, cross_, &across[k]);
  }
  for (size_t k = 0; k < buckets; ++k) {
    MPI_Wait(&across[k], MPI_STATUS_IGNORE);
    // To its own place, where the in-place all-gather takes each rank's part from.
    char* bucket = bytes + k * bucket_ * elem;
    std::memmove(bucket + size_t(displs[k][local]) * elem, bucket, size_t(counts[k][local]) * elem);
    MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, bytes + k * bucket_ * elem, counts[k].data(),
                    displs[k].data(), type, node_, &gather[k]);
  }
  MPI_Waitall(int(buckets), gather.data(), MPI_STATUSES_IGNORE);
  const size_t nodes = size_t(comm_size(cross_));
  // This rank's sends: its node's reduce-scatter and all-gather, and its part's ring all-reduce across.
  bytes_sent += 2 * n * elem * (per - 1) / per + 2 * (n / per) * elem * (nodes - 1) / nodes;
}

namespace {
// MPI_Allgatherv's counts and displacements of the ranges (floats; checked to fit an int).
void ranges(const std::vector<size_t>& bounds, std::vector<int>& counts, std::vector<int>& displs) {
  if (bounds.back() > size_t(INT_MAX))
    fail("a sharded optimizer over ", bounds.back(), " parameters exceeds MPI's int counts; use ", knob_name(Knob::Zero), " 0");
  for (size_t r = 0; r + 1 < bounds.size(); ++r) {
    counts.push_back(int(bounds[r + 1] - bounds[r]));
    displs.push_back(int(bounds[r]));
  }
}
}  // namespace

void MpiStepReducer::gather_shards(float* x, const std::vector<size_t>& bounds) {
  std::vector<int> counts, displs;
  ranges(bounds, counts, displs);
  WaitScope w("the all-gather of the sharded optimizer's parameters");
  MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, counts.data(), displs.data(), MPI_FLOAT, comm_);
  const size_t r = size_t(comm_rank(comm_)), others = bounds.size() - 2;
  bytes_sent += (bounds[r + 1] - bounds[r]) * sizeof(float) * others;  // our range to every other rank
}

void MpiStepReducer::scatter_gradients(float* g, const std::vector<size_t>& bounds) {
  std::vector<int> counts, displs;
  ranges(bounds, counts, displs);  // checks the sizes fit MPI's ints
  const size_t r = size_t(comm_rank(comm_)), n = bounds.back(), ranks = bounds.size() - 1;
  const bool b16 = wire_ == Precision::Bf16;
  if (b16) {
    wire_buf_.resize(n);
    convert(g, wire_buf_.data(), int64_t(n));
  }
  // In buckets of the reducer's size: MPI_Reduce_scatter (Open MPI's, at least) allocates
  // scratch of the whole count it is given; one bucket at a time keeps that to a bucket.
  // Each bucket's block for rank q is q's range clipped to the bucket; MPI delivers this
  // rank's block at the start of a separate receive buffer, copied then to its place in g.
  std::vector<int> part(ranks);
  WaitScope w("the ZeRO-2 reduce-scatter of the gradients");
  for (size_t off = 0; off < n; off += bucket_) {
    const size_t end = std::min(n, off + bucket_);
    for (size_t q = 0; q < ranks; ++q)
      part[q] = int(std::max(off, std::min(end, bounds[q + 1])) - std::max(off, std::min(end, bounds[q])));
    const size_t mine = size_t(part[r]), at = std::max(off, std::min(end, bounds[r]));
    if (b16) {
      recv16_.resize(std::max<size_t>(mine, 1));
      MPI_Reduce_scatter(wire_buf_.data() + off, recv16_.data(), part.data(), bf16_type_, bf16_sum_, comm_);
      convert(recv16_.data(), g + at, int64_t(mine));
    } else {
      recv_.resize(std::max<size_t>(mine, 1));
      MPI_Reduce_scatter(g + off, recv_.data(), part.data(), MPI_FLOAT, MPI_SUM, comm_);
      std::copy(recv_.begin(), recv_.begin() + long(mine), g + at);
    }
  }
  const size_t mine = size_t(counts[r]);
  bytes_sent += (n - mine) * (b16 ? sizeof(bf16) : sizeof(float));  // every other rank's range, once
}

double MpiStepReducer::sum_in_order(double local) {
  std::vector<double> all(size_t(comm_size(comm_)));
  {
    WaitScope w("the allgather of the ranks' gradient sums of squares");
    MPI_Allgather(&local, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, comm_);
  }
  double total = 0;
  for (double x : all) total += x;  // rank order: every rank adds the same numbers alike
  return total;
}

}  // namespace lct
