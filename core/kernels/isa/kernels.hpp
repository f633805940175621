// The kernels that exist once per ISA (isa_generic.cpp, isa_avx2.cpp, isa_avx512.cpp,
// isa_avx512bf16.cpp), as a table of function pointers chosen at run time. Everything here
// is plain data: the tile kernels know nothing of threads, tasks, masks' meaning or MPI.
#pragma once
#include <algorithm>
#include <cstdint>

#include "common/bf16.hpp"
#include "sys/isa.hpp"

namespace lct {

// Where a key block's values lie for the fp32 tiles: np keys of D dimensions, laid out so
// that each micro-kernel call reads one dense run of cache lines. Row-major [D][np] kt (or
// [np][D] v) put each of a call's 64 lines 512 (or 256) bytes after the one before: they
// fell into 8 (16) of an L1's 64 sets and evicted each other and the strip's other operands
// (on Zen 3 the backward tile over key blocks from L3 ran 13% faster in these layouts, the
// whole kernel 2-5% forward, up to 3% backward; the same values in the same order).
//   chunked   kt, vt: the keys in chunks of `chunk` (the ISA's key_chunk), [np/chunk][D][chunk]
//   panels    k, v: D in panels of `panel` floats (the widest p.v or dS.k pass), then one of
//             what is left, each [np][its width]; element (c, i) of a panel starting at d0
//             is at d0 * np + c * width + i - d0
struct KeyBlockLayout {
  int64_t D, np, chunk, panel;
  int64_t chunked(int64_t i, int64_t c) const { return c / chunk * D * chunk + i * chunk + c % chunk; }
  int64_t panel_start(int64_t i) const { return i / panel * panel; }
  int64_t panel_width(int64_t i) const { return std::min(panel, D - panel_start(i)); }
  int64_t in_panels(int64_t c, int64_t i) const {
    const int64_t d0 = panel_start(i);
    return d0 * np + c * panel_width(i) + i - d0;
  }
};

// One query block against one key block of the forward pass, in log2 units: the keys
// arrive multiplied by softmax_scale * log2(e), so p = 2^(s - m). Queries are read in place
// (row stride ldq).
struct FlashFwdTile {
  int64_t D = 0;
  int64_t rows = 0;             // query rows, a multiple of the ISA's strip_rows (4)
  int64_t np = 0;               // key columns, a multiple of the ISA's key_chunk
  int64_t ldq = 0;              // row stride of q
  const float* q = nullptr;     // [rows][ldq]
  const float* kt = nullptr;    // [np/NC][D][NC]   keys, transposed, pre-scaled (KeyBlockLayout)
  const float* v = nullptr;     // [D/panel][np][panel]
  // Tags, for masked tiles only: a key is visible when its doc equals the query's and
  // qlo <= its idx <= qidx (padding keys carry doc INT32_MIN, never equal; qlo is the
  // window's lower end, INT32_MIN without one).
  const int32_t *qidx = nullptr, *qlo = nullptr, *qdoc = nullptr;  // [rows]
  const int32_t *kidx = nullptr, *kdoc = nullptr;  // [np]
  bool masked = false;
  float* acc = nullptr;         // [rows][D] running sum of p * v
  float* m = nullptr;           // [rows] running max of s (-inf before any visible key)
  float* l = nullptr;           // [rows] running sum of p
  float* scratch = nullptr;     // [min(rows, 6)][np]
  // The next tile's kt and v (same D and np), brought into L2 a slice per strip while this
  // one computes; null when there is none.
  const float *next_kt = nullptr, *next_v = nullptr;
};

// One query block against one key block of the backward pass (same units; lse2 = lse *
// log2(e), +inf on rows that see no key, so their p is 0).
struct FlashBwdTile {
  int64_t D = 0, rows = 0, np = 0, ldq = 0;
  const float* q = nullptr;      // [rows][ldq]
  const float* dout = nullptr;   // [rows][ldq]
  const float* lse2 = nullptr;   // [rows]
  const float* delta = nullptr;  // [rows] rowsum(dout * o)
  const float* kt = nullptr;     // [np/NC][D][NC], pre-scaled (KeyBlockLayout)
  const float* vt = nullptr;     // [np/NC][D][NC]
  const float* k = nullptr;      // [D/panel][np][panel]
  const int32_t *qidx = nullptr, *qlo = nullptr, *qdoc = nullptr, *kidx = nullptr, *kdoc = nullptr;
  bool masked = false;
  float* p = nullptr;            // [rows][ldp] scratch
  float* ds = nullptr;           // [rows][ldp] scratch
  int64_t ldp = 0;               // their row stride (np + the ISA's p_pad); 0 means np
  // [rows][lddq]: overwritten with dS k; or, where dq_add is not 0, dq += dq_add * dS k
  // with one fused multiply-add per value (the rounding of DqQueue's add). lddq 0 means D.
  float* dq = nullptr;
  int64_t lddq = 0;
  float dq_add = 0.0f;
  float* dk = nullptr;           // [np][D]    += dS^T q
  float* dv = nullptr;           // [np][D]    += P^T dout
};

// The same tiles with bf16 operands (layouts in flash_tiles_bf16.hpp); state stays fp32.
struct FlashFwdTileBf16 {
  int64_t D = 0, rows = 0, np = 0, ldq = 0;
  const bf16* q = nullptr;      // [rows][ldq]
  const bf16* kt2 = nullptr;    // [D/2][np][2], unscaled
  const bf16* v2 = nullptr;     // [np/2][D][2]
  float kscale = 1.0f;          // what multiplies q . kt2 into the scores (log2 units)
  const int32_t *qidx = nullptr, *qlo = nullptr, *qdoc = nullptr, *kidx = nullptr, *kdoc = nullptr;
  bool masked = false;
  float *acc = nullptr, *m = nullptr, *l = nullptr;
  float* scores = nullptr;      // [strip_rows][np] fp32 scratch
  bf16* scratch = nullptr;      // [strip_rows][np]
};

struct FlashBwdTileBf16 {
  int64_t D = 0, rows = 0, np = 0, ldq = 0;
  const bf16 *q = nullptr, *q2 = nullptr;        // [rows][ldq], [rows/2][D][2]
  const bf16 *dout = nullptr, *dout2 = nullptr;  // likewise
  const float *lse2 = nullptr, *delta = nullptr; // [rows]
  const bf16 *kt2 = nullptr, *vt2 = nullptr;     // [D/2][np][2]
  const bf16* k2 = nullptr;                      // [np/2][D][2]
  float kscale = 1.0f;                           // as FlashFwdTileBf16's
  const int32_t *qidx = nullptr, *qlo = nullptr, *qdoc = nullptr, *kidx = nullptr, *kdoc = nullptr;
  bool masked = false;
  float* p = nullptr;                // [strip_rows][key_chunk] scratch
  bf16 *ds = nullptr;                // [rows][np] scratch
  bf16 *pi = nullptr, *dsi = nullptr;  // [rows/2][np][2] scratch
  float *dq = nullptr, *dk = nullptr, *dv = nullptr;  // as FlashBwdTile
  int64_t lddq = 0;
  float dq_add = 0.0f;
};

// The largest p_pad of any ISA (shape.hpp's PPAD): the workspace plan's bound.
constexpr int kMaxPPad = 16;

struct IsaKernels {
  Isa isa;
  int width;        // floats per vector: head_dim must be a multiple
  int strip_rows;   // a tile's query rows are a multiple of this (its shortest strip; bf16's only)
  int key_chunk;    // key columns per micro-kernel chunk
  int key_panel;    // floats of D per panel of a key block's rows (KeyBlockLayout)
  int p_pad;        // floats added to the row stride of the fp32 backward tile's p and ds
  // Runs `iters` iterations of independent multiply-adds on this thread; returns the FLOPs.
  double (*fma_probe)(int64_t iters);
  double (*bf16_probe)(int64_t iters);  // vdpbf16ps; null where the ISA has none
  void (*flash_fwd_tile)(const FlashFwdTile& t);
  void (*flash_bwd_tile)(const FlashBwdTile& t);
  // A key block's n rows of D (row stride ld) times mult, transposed into the chunked layout
  // of kt and vt ([np/key_chunk][D][key_chunk], KeyBlockLayout), zero from row n to np
  void (*transpose_keys)(const float* x, int64_t ld, int64_t n, int64_t D, int64_t np, float mult, float* out);
  void (*transpose_keys_bf16)(const bf16* x, int64_t ld, int64_t n, int64_t D, int64_t np, float mult, float* out);
  // The softmax's row pieces between products of the oneDNN tile path (softmax_rows.hpp)
  float (*row_max)(const float* x, int64_t n);
  // s = -inf where the query does not see the key (a masked tile's row)
  void (*mask_row)(float* s, const int32_t* kidx, const int32_t* kdoc, int64_t n, int32_t qidx, int32_t qlo,
                   int32_t qdoc);
  float (*exp_shift_sum)(float* x, int64_t n, float shift);  // x = e^(x - shift); returns the sum
  float (*exp_shift_sum_bf16)(const float* x, int64_t n, float shift, bf16* out);  // the same into bf16 out
  // p = e^(s - lse), ds = p (dp - delta): in place, or into bf16 p and ds
  void (*probs_and_grads)(float* s, float* dp, int64_t n, float lse, float delta);
  void (*probs_and_grads_bf16)(const float* s, const float* dp, int64_t n, float lse, float delta, bf16* p,
                               bf16* ds);
  // SwiGLU's element-wise part over n values (swiglu_rows.hpp; layers.hpp threads it)
  void (*swiglu_forward)(float* h, const float* gate, const float* up, int64_t n);
  void (*swiglu_forward_bf16)(bf16* h, const bf16* gate, const bf16* up, int64_t n);
  void (*swiglu_backward)(float* dgate, float* dup, const float* dh, const float* gate, const float* up,
                          int64_t n);
  void (*swiglu_backward_bf16)(bf16* dgate, bf16* dup, const bf16* dh, const bf16* gate, const bf16* up,
                               int64_t n);
  // bf16 operands (vdpbf16ps); null where the ISA has no bf16 dot product
  void (*flash_fwd_tile_bf16)(const FlashFwdTileBf16& t) = nullptr;
  void (*flash_bwd_tile_bf16)(const FlashBwdTileBf16& t) = nullptr;
  // pair_products.hpp's transpose_pairs (ldo = 2 np) and interleave_rows of bf16 rows, through
  // registers; null where the ISA has no bf16 tiles (the plain loops serve)
  void (*transpose_pairs_bf16)(const bf16* x, int64_t ld, int64_t n, int64_t np, int64_t D, bf16* out) = nullptr;
  void (*interleave_rows_bf16)(const bf16* x, int64_t ld, int64_t n, int64_t np, int64_t D, bf16* out) = nullptr;
};

// The table for `isa`, or null when this build has none (e.g. x86 paths on Arm). Whether the
// CPU can run it is the caller's question (CpuInfo::runs).
const IsaKernels* isa_kernels(Isa isa);

}  // namespace lct
