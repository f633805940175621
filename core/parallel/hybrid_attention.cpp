#include "parallel/hybrid_attention.hpp"

#include <numeric>

#include "common/error.hpp"
#include "parallel/watchdog.hpp"
#include "parallel/world.hpp"

namespace lct {

namespace {

// U, after the degree check (the same on every rank, before any communicator is split).
int checked(MPI_Comm cp, int U, int64_t H, int64_t KV) {
  HybridAttention::check_degree(comm_size(cp), U, H, KV);
  return U;
}
}  // namespace

void HybridAttention::check_degree(int64_t cp, int64_t U, int64_t H, int64_t KV) {
  check_hybrid_degree(cp, U, H, KV);
}

double HybridAttention::buffer_bytes(int U, int64_t Tl, int64_t H, int64_t KV, int64_t D,
                                     Precision activations) {
  return UlyssesAttention::exchange_bytes(U, Tl, H, KV, D, activations) +
         RingAttention::buffer_bytes(U * Tl, H / U, UlyssesAttention::kv_heads(U, KV), D, activations);
}

CpGrid::CpGrid(MPI_Comm cp, int U) {
  const int r = comm_rank(cp);
  WaitScope w("the set-up of the hybrid cp grid (communicator splits)");
  MPI_Comm_split(cp, r / U, r % U, &ulysses);  // consecutive cp ranks: one ring position
  MPI_Comm_split(cp, r % U, r / U, &ring);     // one Ulysses rank of every position
}

CpGrid::~CpGrid() {
  if (ring != MPI_COMM_NULL) MPI_Comm_free(&ring);
  if (ulysses != MPI_COMM_NULL) MPI_Comm_free(&ulysses);
}

HybridAttention::HybridAttention(MPI_Comm cp, int U, int64_t Tl, int64_t H, int64_t KV, int64_t D,
                                 AttnBlocks blocks, Isa isa, Precision activations,
                                 CpTransport transport)
    : CpGrid(cp, checked(cp, U, H, KV)),
      UlyssesAttention(CpGrid::ulysses, Tl, H, KV, D, activations,
                       std::make_unique<RingAttention>(CpGrid::ring, U * Tl, H / U,
                                                       UlyssesAttention::kv_heads(U, KV), D, blocks,
                                                       isa, activations, transport)),
      u_(U), r_(comm_size(cp) / U),
      ring_(static_cast<const RingAttention*>(&UlyssesAttention::inner())) {}

}  // namespace lct
