// LM head + cross-entropy, fused and chunked over tokens and vocabulary, so the [T, V]
// logits never exist whole: at most [row_chunk, vocab_chunk] at a time. Vocabulary-parallel
// (tensor parallelism): each rank of a tp group holds V rows of the LM head, from row v0 of
// the whole vocabulary; the rows' maxima, sums of exp and target logits are combined over
// the group, and so is the input gradient.
#pragma once
#include <cstdint>

#include "common/bf16.hpp"
#include "sys/memory.hpp"

namespace lct {

class TpComm;  // kernels/tp_comm.hpp

struct XentChunks {
  int64_t rows = 2048;
  int64_t vocab = 8192;
};

class LmHeadXent {
 public:
  // `products` bf16: x and w arrive as bf16 and the backward products take bf16 operands.
  // `tp` (optional): the group whose ranks hold the other rows of the vocabulary; V is this
  // rank's rows, the first of them row v0 of the whole vocabulary. `sum_dx` false: dx is
  // left as this rank's rows' part (the caller reduce-scatters it: sequence parallelism).
  LmHeadXent(int64_t max_tokens, int64_t V, Precision products, XentChunks chunks = {},
             TpComm* tp = nullptr, int64_t v0 = 0, bool sum_dx = true);
  static size_t workspace_bytes_for(int64_t max_tokens, int64_t V, Precision products,
                                    XentChunks chunks = {});

  // x [T, C] (the final-norm output), w [V, C], targets [T] (-1 = not scored); X is float or
  // bf16. Logits, softmax and loss are fp32. Returns the sum of per-token losses (double)
  // over scored tokens, each multiplied by its `weights` [T] entry when given (a weight of
  // exactly 1 leaves the term bitwise as it is without weights). When dx is given, also
  // writes dx [T, C] = grad_scale * d(sum)/dx and adds grad_scale * d(sum)/dw to dw [V, C]
  // (grad_scale = 1 / the summed target weights of the whole step). With `tp`: targets and
  // argmax are whole-vocabulary ids, w is this rank's [V, C] rows, dw their gradient, and the
  // loss, dx, argmax and token_loss are the whole vocabulary's, alike on every rank of the
  // group. `argmax` [T] (optional)
  // receives the greedy prediction of every row, `token_loss` [T] (optional) every row's
  // weighted loss (0 where not scored).
  template <class X>
  double run(const X* x, const X* w, const int32_t* targets, int64_t T, int64_t C,
             float grad_scale, float* dx, float* dw, int32_t* argmax = nullptr,
             float* token_loss = nullptr, const float* weights = nullptr);

 private:
  // tp: the row chunk's maxima, sums of exp, target logits and argmax combined over the group.
  void combine_over_tp(int64_t R, int32_t* argmax);
  int64_t V_;
  XentChunks chunks_;
  TpComm* tp_;
  int64_t v0_;
  bool sum_dx_;
  Buffer<float> red_;  // tp: [3 rows] the reductions' buffer
  Buffer<float> logits_;  // [rows, vocab]
  Buffer<bf16> dlogits_;  // [rows, vocab] the backward products' operand (bf16 products)
  Buffer<float> lse_;     // [max_tokens]
  Buffer<float> max_;     // [rows] running max
  Buffer<float> sum_;     // [rows] running sum of exp
  Buffer<float> target_logit_;  // [rows]
};

}  // namespace lct
