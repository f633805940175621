// LM head + cross-entropy, fused and chunked over tokens and vocabulary, so the [T, V]
// logits never exist whole: at most [row_chunk, vocab_chunk] at a time.
#pragma once
#include <cstdint>

#include "common/bf16.hpp"
#include "sys/memory.hpp"

namespace lct {

struct XentChunks {
  int64_t rows = 2048;
  int64_t vocab = 8192;
};

class LmHeadXent {
 public:
  // `products` bf16: x and w arrive as bf16 and the backward products take bf16 operands.
  LmHeadXent(int64_t max_tokens, int64_t V, Precision products, XentChunks chunks = {});
  static size_t workspace_bytes_for(int64_t max_tokens, int64_t V, Precision products,
                                    XentChunks chunks = {});

  // x [T, C] (the final-norm output), w [V, C], targets [T] (-1 = not scored); X is float or
  // bf16. Logits, softmax and loss are fp32. Returns the sum of per-token losses (double)
  // over scored tokens, each multiplied by its `weights` [T] entry when given (a weight of
  // exactly 1 leaves the term bitwise as it is without weights). When dx is given, also
  // writes dx [T, C] = grad_scale * d(sum)/dx and adds grad_scale * d(sum)/dw to dw [V, C]
  // (grad_scale = 1 / the summed target weights of the whole step). `argmax` [T] (optional)
  // receives the greedy prediction of every row, `token_loss` [T] (optional) every row's
  // weighted loss (0 where not scored).
  template <class X>
  double run(const X* x, const X* w, const int32_t* targets, int64_t T, int64_t C,
             float grad_scale, float* dx, float* dw, int32_t* argmax = nullptr,
             float* token_loss = nullptr, const float* weights = nullptr);

 private:
  int64_t V_;
  XentChunks chunks_;
  Buffer<float> logits_;  // [rows, vocab]
  Buffer<bf16> dlogits_;  // [rows, vocab] the backward products' operand (bf16 products)
  Buffer<float> lse_;     // [max_tokens]
  Buffer<float> max_;     // [rows] running max
  Buffer<float> sum_;     // [rows] running sum of exp
  Buffer<float> target_logit_;  // [rows]
};

}  // namespace lct
