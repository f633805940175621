// LM head + cross-entropy, fused and chunked over tokens and vocabulary, so the [T, V]
// logits never exist whole: at most [row_chunk, vocab_chunk] at a time.
#pragma once
#include <cstdint>

#include "sys/memory.hpp"

namespace lct {

struct XentChunks {
  int64_t rows = 2048;
  int64_t vocab = 8192;
};

class LmHeadXent {
 public:
  LmHeadXent(int64_t max_tokens, int64_t V, XentChunks chunks = {});
  static size_t workspace_bytes_for(int64_t max_tokens, int64_t V, XentChunks chunks = {});

  // x [T, C] (the final-norm output), w [V, C], targets [T] (-1 = not scored).
  // Returns the sum of per-token losses (double) over scored tokens. When dx is given, also
  // writes dx [T, C] = grad_scale * d(sum)/dx and adds grad_scale * d(sum)/dw to dw [V, C]
  // (grad_scale = 1 / valid targets of the whole step). `argmax` [T] (optional) receives the
  // greedy prediction of every row.
  double run(const float* x, const float* w, const int32_t* targets, int64_t T, int64_t C,
             float grad_scale, float* dx, float* dw, int32_t* argmax = nullptr);

 private:
  int64_t V_;
  XentChunks chunks_;
  Buffer<float> logits_;  // [rows, vocab]
  Buffer<float> lse_;     // [max_tokens]
  Buffer<float> max_;     // [rows] running max
  Buffer<float> sum_;     // [rows] running sum of exp
  Buffer<float> target_logit_;  // [rows]
};

}  // namespace lct
