// The kernels that exist once per ISA (isa_generic.cpp, isa_avx2.cpp, isa_avx512.cpp,
// isa_avx512bf16.cpp), as a table of function pointers chosen at run time. Everything here
// is plain data: the tile kernels know nothing of threads, tasks, masks' meaning or MPI.
#pragma once
#include <cstdint>

#include "sys/isa.hpp"

namespace lct {

// One query block against one key block of the forward pass, in log2 units: the queries
// arrive multiplied by softmax_scale * log2(e), so p = 2^(s - m).
struct FlashFwdTile {
  int64_t D = 0;
  int64_t rows = 0;             // query rows, a multiple of the ISA's strip_rows
  int64_t np = 0;               // key columns, a multiple of the ISA's key_chunk
  const float* q = nullptr;     // [rows][D], pre-scaled
  const float* kt = nullptr;    // [D][np]   keys, transposed
  const float* v = nullptr;     // [np][D]
  // Tags, for masked tiles only: a key is visible when its doc equals the query's and its
  // idx is <= the query's (padding keys carry doc INT32_MIN, never equal).
  const int32_t *qidx = nullptr, *qdoc = nullptr;  // [rows]
  const int32_t *kidx = nullptr, *kdoc = nullptr;  // [np]
  bool masked = false;
  float* acc = nullptr;         // [rows][D] running sum of p * v
  float* m = nullptr;           // [rows] running max of s (-inf before any visible key)
  float* l = nullptr;           // [rows] running sum of p
  float* scratch = nullptr;     // [strip_rows][np]
};

// One query block against one key block of the backward pass (same units; lse2 = lse *
// log2(e), +inf on rows that see no key, so their p is 0).
struct FlashBwdTile {
  int64_t D = 0, rows = 0, np = 0;
  const float* q = nullptr;      // [rows][D], pre-scaled
  const float* dout = nullptr;   // [rows][D]
  const float* lse2 = nullptr;   // [rows]
  const float* delta = nullptr;  // [rows] rowsum(dout * o)
  const float* kt = nullptr;     // [D][np]
  const float* vt = nullptr;     // [D][np]
  const float* k = nullptr;      // [np][D]
  const int32_t *qidx = nullptr, *qdoc = nullptr, *kidx = nullptr, *kdoc = nullptr;
  bool masked = false;
  float* p = nullptr;            // [rows][np] scratch
  float* ds = nullptr;           // [rows][np] scratch
  float* dq = nullptr;           // [rows][D]  overwritten with dS K
  float* dk = nullptr;           // [np][D]    += dS^T q (pre-scaled q: times ln 2 gives dK)
  float* dv = nullptr;           // [np][D]    += P^T dout
};

struct IsaKernels {
  Isa isa;
  int width;        // floats per vector: head_dim must be a multiple
  int strip_rows;   // query rows per micro-kernel strip
  int key_chunk;    // key columns per micro-kernel chunk
  // Runs `iters` iterations of independent multiply-adds on this thread; returns the FLOPs.
  double (*fma_probe)(int64_t iters);
  double (*bf16_probe)(int64_t iters);  // vdpbf16ps; null where the ISA has none
  void (*flash_fwd_tile)(const FlashFwdTile& t);
  void (*flash_bwd_tile)(const FlashBwdTile& t);
};

// The table for `isa`, or null when this build has none (e.g. x86 paths on Arm). Whether the
// CPU can run it is the caller's question (CpuInfo::runs).
const IsaKernels* isa_kernels(Isa isa);

}  // namespace lct
