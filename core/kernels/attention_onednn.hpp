// The tile path beside the fused kernel (attention.hpp's FlashAttention), same layouts,
// masks and contracts: each product of a tile one matrix-product call, oneDNN's matmul or,
// in bf16 on a Xeon with AMX, lctrain's own on the matrix engine, where the fused kernel's
// bf16 operands are widened to fp32 (AVX512_BF16 runs at half the fp32 rate there).
// Elsewhere it is what oneDNN's brgemm does on the ISA at hand. Which path trains is measured
// at start-up.
//
// What is oneDNN's and what is ours:
//   oneDNN  every product of a tile: S = Q K^T and O += P V forward; S, dP = dO V^T,
//           dV += P^T dO, dK += dS^T Q and dQ += dS K backward; fp32 accumulation, bf16 or
//           fp32 operands (Precision `products`); except in bf16 where the CPU has AMX
//           (TileEngine): then every product is ours on the matrix engine
//           (pair_products.hpp), reading k, v, q and dout packed once a call;
//   ours    which tiles exist (the same block decisions as the fused kernel: tag spans,
//           skipped, full or masked), the mask inside masked tiles, the online softmax
//           between the products, and the order of every sum.
//
// Forward: one task per (query head, query block); the visible key blocks are taken in
// strips of up to kStripBlocks consecutive blocks (one product each way per strip), with the
// online softmax (natural exp, the max subtracted) over each strip.
// Backward: one pass, as the fused kernel's (dq_order.hpp): one task per (KV head, run of
// key blocks) computes each tile's P and dS once (5 products a tile), sums its dK and dV over
// the query blocks (and the query heads of its group) that see it, and hands each tile's dQ
// contribution to the query block's turn, so dQ is summed in key order: the bits do not
// depend on the thread count.
#pragma once
#include <functional>
#include <memory>

#include "kernels/attention.hpp"

namespace lct {

// Where a call's bf16 products run when head_dim is a multiple of 16, the query block of 16
// and the key block of 32: auto, on the matrix engine where the CPU has AMX, else through
// oneDNN; emulated, the matrix-engine kernel in plain C++ (tests, any CPU).
enum class TileEngine { Auto, Emulated };

class OneDnnAttention {
 public:
  // Buffers for the largest call (`limits`) allocated once: the operands packed per head in
  // the product type, and each thread's tiles.
  // isa: the vector path of the softmax between the products
  OneDnnAttention(const AttnLimits& limits, AttnBlocks blocks, Isa isa, Precision products = Precision::Fp32,
                  TileEngine engine = TileEngine::Auto);
  ~OneDnnAttention();

  // As FlashAttention::forward: o and lse overwritten; a row that sees no key gets o = 0,
  // lse = -inf.
  template <class T>
  void forward(const AttnDims& d, const T* q, const T* k, const T* v, TokenTags qt, TokenTags kt,
               float* o, float* lse);

  // As FlashAttention::backward: adds the gradients to dq, dk, dv.
  template <class T>
  void backward(const AttnDims& d, const T* q, const T* k, const T* v, const float* lse,
                const float* delta, const T* dout, TokenTags qt, TokenTags kt, float* dq,
                float* dk, float* dv);

  // bf16 only where oneDNN has bf16 matmuls on this CPU (AVX512_BF16, AMX); elsewhere bf16
  // operands are widened and multiplied in fp32.
  Precision products() const;
  bool matrix_engine() const;  // the products through pair_products.hpp
  size_t workspace_bytes() const;  // packed operands and every thread's tiles
  static size_t workspace_bytes_for(const AttnLimits& limits, AttnBlocks blocks, int threads, Precision products,
                                    TileEngine engine = TileEngine::Auto);
  // Called by thread 0 between tasks while a kernel runs (a ring's transfers progress).
  void set_progress(std::function<void()> hook);
  static constexpr int64_t kStripBlocks = 4;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lct
