// Attention over a stream of tokens: causal on a per-token index and restricted to one
// document, optionally to a sliding window of the latest keys, with grouped-query heads. The flash kernel keeps memory linear in the sequence
// length (no [Tq, Tk] buffer ever: tiles of [block_q, block_k]) and is what training runs;
// the reference kernel is the plain definition, for tests.
//
// Layouts (row-major, token-major, as the projections produce them):
//   q, o, dq [Tq, H*D]    k, v, dk, dv [Tk, KV*D]    lse, delta [H, Tq]
// Query head h reads key/value head h / (H / KV): K/V are never copied per query head.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/bf16.hpp"
#include "sys/isa.hpp"
#include "sys/memory.hpp"

namespace lct {

struct IsaKernels;

struct AttnDims {
  int64_t Tq = 0, Tk = 0;
  int64_t H = 1, KV = 1, D = 1;
  int64_t window = 0;  // sliding window W in tokens; 0 = none (full causal)
};

// A query sees a key when both have the same doc >= 0 and key.idx <= query.idx (doc -1 is
// padding: sees nothing, is seen by nothing), and with a window W also key.idx > query.idx
// - W: the query itself and the W - 1 tokens before it (Hugging Face's `sliding_window`,
// masking_utils' kv_idx > q_idx - sliding_window). Within a stream, idx must increase with
// the token's position in the buffer only for speed (whole tiles are skipped or unmasked
// from the tiles' min/max), never for correctness.
struct TokenTags {
  const int32_t* idx;
  const int32_t* doc;
};
// The lowest key idx a query at idx sees under `window` (INT32_MIN without one).
inline int32_t window_low(int32_t idx, int64_t window) {
  return window > 0 ? int32_t(std::max<int64_t>(INT32_MIN, int64_t(idx) - window + 1)) : INT32_MIN;
}

// What a run of tokens spans, padding excluded: enough to decide for whole blocks.
struct TagSpan {
  int32_t idx_min = INT32_MAX, idx_max = INT32_MIN, doc_min = INT32_MAX, doc_max = INT32_MIN;
  bool any_pad = false;
  bool empty() const { return doc_max < 0; }  // padding only (or no tokens)
};
TagSpan tag_span(TokenTags t, int64_t begin, int64_t end);
// False only when no query of `q` can see any key of `k` under `window` (0 = none): the
// whole block pair may then be skipped. True says nothing about every pair.
bool may_see(const TagSpan& q, const TagSpan& k, int64_t window);
// True when every query of `q` sees every key of `k`: no mask needed.
bool sees_all(const TagSpan& q, const TagSpan& k, int64_t window);
// The spans of the maximal runs of consecutive idx in t[0, n): a cp shard is a few such
// runs (its chunks of each sequence), so block decisions on runs are exact where one span
// of the whole shard would join sequences.
std::vector<TagSpan> tag_runs(TokenTags t, int64_t n);

struct AttnBlocks {
  int64_t q = 128;
  int64_t k = 128;
};

// The tiles of one call, as both attention paths decide them: a (query block, key block)
// pair is skipped (no pair visible), full (every pair visible: no mask) or masked.
enum class Tile { Skip, Full, Masked };
struct TileGrid {
  std::vector<TagSpan> qs, ks;  // each block's span
  int64_t nq, nk, BQ, BK, window;
  TileGrid(const AttnDims& d, TokenTags qt, TokenTags kt, AttnBlocks b);
  Tile tile(int64_t ib, int64_t jb) const;
  int64_t rows(int64_t ib, int64_t Tq) const { return std::min(BQ, Tq - ib * BQ); }
  int64_t cols(int64_t jb, int64_t Tk) const { return std::min(BK, Tk - jb * BK); }
  // The first key block at or after `from` that query block ib sees (nk if none).
  int64_t next_visible(int64_t ib, int64_t from) const;
};

// Which attention path computes the tiles: the fused kernel (FlashAttention: the ISA's
// micro-kernels with the softmax in registers) or the tile path through oneDNN's matmul
// (OneDnnAttention, attention_onednn.hpp).
enum class AttnKernel { Fused, OneDnn };
inline const char* attn_kernel_name(AttnKernel k) { return k == AttnKernel::OneDnn ? "onednn" : "fused"; }

// The largest call a FlashAttention object serves: its workspace is sized from these once.
struct AttnLimits {
  int64_t max_tq = 0, max_tk = 0;
  int64_t heads = 1, kv_heads = 1, head_dim = 1;
};

// Tiles of [block.q, block.k] scores computed by the ISA's micro-kernels (kernels/isa/):
// keys and values are packed once per call (transposed, padded to the micro-kernel's key
// chunk), scores stay in registers through the online softmax, in log2 units.
//
// Forward: one task per query block (or 2 or 4 adjacent ones) for the query heads of a KV
// head (or one), costliest first, dynamic schedule.
// Backward: one task per (KV head, run of up to 8 consecutive key blocks), taken in order;
// it owns its dK/dV rows and walks the query blocks that see them (their q and dout rows
// packed once by the call). A tile's dQ contribution to a query block is added when every
// earlier key block has added its own (a per-(head, query block) turn passed on with
// release/acquire), so dQ is summed in key order: the same bits on any thread count, no
// private dQ copies.
class FlashAttention {
 public:
  // Allocates every buffer once (per-thread scratch first-touched by its thread). A head
  // dimension that is not a multiple of the ISA's vector width runs the generic path.
  // `products` bf16 multiplies bf16 operands (vdpbf16ps) where the ISA has bf16 tiles; the
  // softmax, its statistics, o, lse and every gradient stay fp32 either way.
  FlashAttention(const AttnLimits& limits, AttnBlocks blocks, Isa isa,
                 Precision products = Precision::Fp32);
  ~FlashAttention();

  // o and lse overwritten. Rows that see no key get o = 0, lse = -inf. q, k, v are fp32 or
  // bf16 (converted while packed, whatever the products are).
  template <class T>
  void forward(const AttnDims& d, const T* q, const T* k, const T* v, TokenTags qt, TokenTags kt,
               float* o, float* lse);

  // Adds the gradients to dq, dk, dv. lse is the log-sum-exp of the rows' complete softmax
  // and delta = rowsum(dout * o) (attention_delta), both over every key the row sees: with
  // them, P = exp(scale q k - lse) of any subset of keys is exact (the ring uses this).
  template <class T>
  void backward(const AttnDims& d, const T* q, const T* k, const T* v, const float* lse,
                const float* delta, const T* dout, TokenTags qt, TokenTags kt, float* dq,
                float* dk, float* dv);

  // Called by thread 0 between tiles while a kernel runs (e.g. to make communication
  // progress); the kernel knows nothing of what it does.
  void set_progress(std::function<void()> hook) { progress_ = std::move(hook); }

  Isa isa() const;              // the kernel path in use
  Precision products() const;  // bf16 only where the path has bf16 tiles
  size_t workspace_bytes() const;
  static size_t workspace_bytes_for(const AttnLimits& limits, AttnBlocks blocks, int threads);
  const AttnBlocks& blocks() const { return blocks_; }

 private:
  struct Scratch;
  struct Packed;
  void check(const AttnDims& d) const;
  // Rows of a query block rounded up to the micro-kernels' strips (the padding rows are
  // zero and see nothing): the tiles never run strips of padding alone.
  int64_t whole_strips(int64_t rows) const;
  template <class T>
  void pack_keys(const AttnDims& d, const T* k, const T* v, TokenTags kt, bool backward);
  struct FwdTask;
  struct FwdTiles;
  template <class T>
  void forward_task(const AttnDims& d, const TileGrid& grid, const T* q, TokenTags qt, const FwdTask& w,
                    float* o, float* lse, int thread);
  template <class T>
  void fwd_queries(const AttnDims& d, const TileGrid& grid, const T* q, TokenTags qt, const FwdTask& w,
                   FwdTiles& f) const;
  void fwd_key_block(const AttnDims& d, const TileGrid& grid, const FwdTask& w, FwdTiles& f, int64_t jb,
                     int64_t last, int64_t jn, int thread) const;
  struct BwdCall;
  struct BwdTiles;
  template <class T>
  void pack_query_block(const AttnDims& d, const TileGrid& grid, const T* q, const T* dout, int64_t task);
  // one backward task: key blocks [jb0, jb1) of KV head g
  void backward_run(const BwdCall& c, int64_t g, int64_t jb0, int64_t jb1, int thread);
  BwdTiles bwd_tiles(Scratch& sc) const;
  void add_key_grads(const BwdCall& c, const Scratch& sc, int64_t g, int64_t jb0, int64_t jb1) const;
  void bwd_queries(const BwdCall& c, BwdTiles& b, Scratch& sc, int64_t h, int64_t ib) const;

  const IsaKernels* kern_;
  bool bf16_tiles_ = false;
  bool dq_in_place_ = false;  // tiles add their dQ in place when it is their turn (DqQueue::in_place)
  AttnLimits lim_;
  AttnBlocks blocks_;
  int64_t np_, bqp_;  // key block padded to the key chunk, query block to the strip
  int64_t ldp_;       // row stride of the fp32 backward tile's p and ds: np_ + the ISA's p_pad
  std::unique_ptr<Packed> packed_;
  std::vector<Scratch> scratch_;  // one per thread
  std::function<void()> progress_;
};

// delta [H, Tq] = rowsum(dout * o) per head (o, dout fp32 or bf16).
template <class T>
void attention_delta(const T* o, const T* dout, int64_t Tq, int64_t H, int64_t D, float* delta);

// The definition, one row at a time in double precision. Same layouts and contracts.
void attention_reference_forward(const AttnDims& d, const float* q, const float* k, const float* v,
                                 TokenTags qt, TokenTags kt, float* o, float* lse);
void attention_reference_backward(const AttnDims& d, const float* q, const float* k,
                                  const float* v, const float* dout, TokenTags qt, TokenTags kt,
                                  float* dq, float* dk, float* dv);

}  // namespace lct

namespace lct {

// Merges a partial attention result over another, disjoint set of keys into (o, lse):
//   L = max(L1, L2) + log(1 + exp(-|L1 - L2|));  O = e^(L1 - L) O1 + e^(L2 - L) O2
// in fp32, with (0, -inf) for rows that have seen no key on either side (no NaN).
// o, o_part [Tq, H*D]; lse, lse_part [H, Tq].
void attention_merge(float* o, float* lse, const float* o_part, const float* lse_part, int64_t Tq,
                     int64_t H, int64_t D);

}  // namespace lct
