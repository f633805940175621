// bf16 products on Intel's matrix engine (AMX), for the attention's tile path: the engine's
// tiles take the second operand in "pairs" (VNNI) layout, so the path packs k and v into it
// once a call and each product reads them in place, where a library call per product would
// repack its operand every time (oneDNN's matmul did: 165 GFLOP/s a thread on 128 x 128 x 64
// tiles of a 16-core Xeon, about a tenth of the engine's rate).
//
// An emulation runs the same kernel on plain C++ tiles, so that the kernel's indexing, its
// edges and its callers are tested on every CPU; the hardware engine differs from it only in
// the instructions that load, multiply and store a tile.
#pragma once
#include <cstdint>

#include "common/bf16.hpp"

namespace lct {

// C [M, N] = A [M, K] B [K, N] (accumulate: C +=), fp32 accumulation:
//   A  bf16 rows lda elements apart;
//   B  bf16 in pairs: element (k, n) at b[(k / 2) * ldb + 2 * n + k % 2] (ldb even);
//   C  fp32 rows ldc apart; only its [M, N] is read or written.
// The kernel reads whole 16-row and 16-column tiles: A's rows up to M rounded up to 16, and
// B's columns up to N rounded up to 16 and pair rows up to K rounded up to 32, halved, must
// be readable and finite (zeros where they lie beyond the matrix); A's columns beyond K are
// never read.
struct PairProduct {
  int64_t M, N, K;
  const bf16* a;
  int64_t lda;
  const bf16* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  bool accumulate;
};

enum class PairEngine {
  Amx,       // the matrix engine's tile instructions (needs amx_tiles_usable())
  Emulated,  // the same kernel on plain C++ tiles: any CPU, for tests
};

// This CPU and this build run AMX tiles (AMX-BF16 in CPUID, the OS saving tile state, the
// kernel granting this process the tile data).
bool amx_tiles_usable();

void pair_product(const PairProduct& p, PairEngine engine);

// x [R, C] (rows ld apart) as a B operand over its rows: out[(r / 2) * 2 * C + 2 * c + r % 2]
// = x[r][c], with a zero row after the last where R is odd. The engine's vector
// instructions where it has them (two permutes per 32 elements), plain C++ otherwise.
void pair_rows(const bf16* x, int64_t R, int64_t C, int64_t ld, bf16* out, PairEngine engine);

// The plain definition: C (+)= A B, each element a sum over k in order (tests).
void pair_product_reference(const PairProduct& p);

// The pair layouts of a block of n rows of D (rows ld apart), zeros for rows n..np (np and D
// even), as both attention paths keep keys, values, queries and gradients:
//   transpose_pairs  out[(d / 2) * ldo + 2 * c + d % 2] = x[c][d]: B = x^T, the product
//                    reducing over D (ldo >= 2 np: the pair rows' stride);
//   interleave_rows  out[(c / 2) * 2 * D + 2 * d + c % 2] = x[c][d]: B = x, the product
//                    reducing over the rows (fp32 rows rounded to bf16).
void transpose_pairs(const bf16* x, int64_t ld, int64_t n, int64_t np, int64_t D, bf16* out, int64_t ldo);
template <class T>
void interleave_rows(const T* x, int64_t ld, int64_t n, int64_t np, int64_t D, bf16* out);

}  // namespace lct
