// Forward and backward of the element-wise and row-wise layers of a Llama decoder, over
// plain row-major buffers. T = tokens, C = hidden size. All parallelise over tokens with
// OpenMP (static schedule) and are deterministic for a given thread count. X is the type of
// activations that feed matrix products (float, or bf16 in mixed precision); arithmetic is
// fp32 throughout and the residual stream, norms' inputs and every gradient stay fp32.
#pragma once
#include <cstdint>
#include <vector>

#include "common/bf16.hpp"
#include "sys/isa.hpp"

namespace lct {

// y = x / sqrt(mean(x^2) + eps) * w.   x, y [T, C]; rstd [T] saved for backward; w [C].
template <class X>
void rmsnorm_forward(X* y, float* rstd, const float* x, const float* w, int64_t T, int64_t C,
                     float eps);
// dx [T, C] (+)= ...; dw [C] += ...  (accumulate_dx adds into dx, else overwrites)
void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* rstd,
                      const float* w, int64_t T, int64_t C, bool accumulate_dx);

// RoPE as Hugging Face Llama applies it ("rotate_half"): dimension i pairs with i + D/2,
// angle = pos * inv_freq[i] (plain RoPE: theta^(-2i/D)), computed in double so long positions
// stay exact; cos and sin are multiplied by `attention_factor` (Hugging Face's
// attention_scaling, 1 but for yarn), which scales q and k alike.
class RopeTable {
 public:
  RopeTable() = default;
  // inv_freq [head_dim / 2] (model/rope.hpp computes it, plain or with rope_scaling).
  RopeTable(int64_t max_pos, const std::vector<double>& inv_freq, double attention_factor = 1.0);
  // x [T, heads * D], rotated (and scaled) in place by the positions pos [T]. backward = the
  // transpose (the inverse rotation, scaled alike).
  void forward(float* x, const int32_t* pos, int64_t T, int64_t heads) const;
  void backward(float* dx, const int32_t* pos, int64_t T, int64_t heads) const;
  // The same rotation read from x and written to `out` (of type X).
  template <class X>
  void forward(const float* x, X* out, const int32_t* pos, int64_t T, int64_t heads) const;
  int64_t max_pos() const { return max_pos_; }

 private:
  template <class X>
  void rotate(const float* x, X* out, const int32_t* pos, int64_t T, int64_t heads, float sign) const;
  int64_t max_pos_ = 0, half_ = 0;
  std::vector<float> cos_, sin_;  // [max_pos, D/2]
};

// h = silu(gate) * up, all [T*I] (n elements), by the kernel path `isa` (its table's
// swiglu rows; the same bits on every x86 path for gates above -87).
template <class X>
void swiglu_forward(Isa isa, X* h, const X* gate, const X* up, int64_t n);
// dgate, dup from dh (overwritten).
template <class X>
void swiglu_backward(Isa isa, X* dgate, X* dup, const X* dh, const X* gate, const X* up, int64_t n);

// x[t] = table[tokens[t]]    x [T, C], table [V, C]. Vocabulary-parallel (tensor parallelism):
// table holds the rows [v0, v0 + V) of the whole vocabulary, and the tokens outside them get
// zero rows (the tp group sums the ranks' x).
void embedding_forward(float* x, const int32_t* tokens, const float* table, int64_t T, int64_t C,
                       int64_t v0 = 0, int64_t V = INT64_MAX);
// dtable[tokens[t]] += dx[t]  (parallel over channels: no two threads touch one element);
// tokens outside [v0, v0 + V) are not this rank's rows.
void embedding_backward(float* dtable, const int32_t* tokens, const float* dx, int64_t T, int64_t C,
                        int64_t v0 = 0, int64_t V = INT64_MAX);

// y = a + b (y may alias a)
void add(float* y, const float* a, const float* b, int64_t n);

}  // namespace lct
