// Hybrid context parallelism (USP, "Unified Sequence Parallelism"): the cp group of size cp
// is a grid of U Ulysses ranks x R = cp / U ring ranks. Cp rank r is Ulysses rank r % U of
// ring position r / U: U consecutive cp ranks (the ranks of one node, when the mesh lays
// them so) share their tokens by all-to-all, and the R groups pass K/V around a ring.
//   forward   all-to-all over the U ranks: [Tl tokens, H heads] -> [U x Tl tokens, H/U
//             heads]; ring attention over the R ring positions on those U x Tl tokens for
//             H/U query and KV/U key/value heads; all-to-all back. Backward mirrors it.
// It is UlyssesAttention's all-to-alls with a RingAttention (over the ring sub-communicator,
// through its public interface, any --cp-transport) as the inner op. U = 1 is the ring
// with trivial all-to-alls, U = cp Ulysses with a ring of one. Causal balance comes from
// the shard: shard_indices(..., group = U) zigzags over the R ring positions and splits
// each position's chunk pair among its U ranks (model/shard.hpp), so what a ring rank
// holds after the all-to-all is its zigzag pair for R ranks.
#pragma once
#include <mpi.h>

#include "parallel/ring_attention.hpp"
#include "parallel/ulysses_attention.hpp"

namespace lct {

// The two sub-communicators of the cp grid (collective on cp; freed on destruction).
struct CpGrid {
  CpGrid(MPI_Comm cp, int ulysses_degree);
  ~CpGrid();
  CpGrid(const CpGrid&) = delete;
  CpGrid& operator=(const CpGrid&) = delete;
  MPI_Comm ulysses = MPI_COMM_NULL;  // the U ranks of this rank's ring position
  MPI_Comm ring = MPI_COMM_NULL;     // the R ranks with this rank's Ulysses rank
};

class HybridAttention : private CpGrid, public UlyssesAttention {
 public:
  // Throws (the same on every rank, before any communicator is made) when the degrees do
  // not fit: check_degree's message.
  HybridAttention(MPI_Comm cp, int ulysses_degree, int64_t local_tokens, int64_t H, int64_t KV,
                  int64_t D, AttnBlocks blocks, Isa isa, Precision activations,
                  CpTransport transport = CpTransport::Auto);
  // U must divide cp and H, and divide KV or be a multiple of it (KV heads replicated).
  static void check_degree(int64_t cp, int64_t U, int64_t H, int64_t KV);
  // The all-to-alls' buffers at U plus the ring's on U x Tl tokens of H/U heads.
  static double buffer_bytes(int U, int64_t Tl, int64_t H, int64_t KV, int64_t D,
                             Precision activations);
  const RingAttention& ring() const { return *ring_; }
  int ulysses_degree() const { return u_; }
  int ring_degree() const { return r_; }

 private:
  int u_, r_;
  const RingAttention* ring_;
};

}  // namespace lct
