// The attention path a process computes its tiles with (AttnKernel, attention.hpp): the fused
// kernel (FlashAttention) or the tile path through oneDNN's matmul (OneDnnAttention), behind
// one interface, so that the cp attentions and the model hold one object whichever it is.
// Chosen once per process before the first kernel is made (train's --attention-kernel: forced,
// or timed at start-up), as the GEMM library is (gemm.hpp).
#pragma once
#include <functional>
#include <memory>

#include "kernels/attention.hpp"
#include "kernels/attention_onednn.hpp"

namespace lct {

// The path every AttentionKernel made from now on takes (the fused kernel until set).
void attention_kernel_setup(AttnKernel k);
AttnKernel attention_kernel();

class AttentionKernel {
 public:
  AttentionKernel(const AttnLimits& limits, AttnBlocks blocks, Isa isa, Precision products = Precision::Fp32,
                  AttnKernel which = attention_kernel());

  template <class T>
  void forward(const AttnDims& d, const T* q, const T* k, const T* v, TokenTags qt, TokenTags kt, float* o,
               float* lse) {
    if (onednn_) onednn_->forward(d, q, k, v, qt, kt, o, lse);
    else flash_->forward(d, q, k, v, qt, kt, o, lse);
  }
  template <class T>
  void backward(const AttnDims& d, const T* q, const T* k, const T* v, const float* lse, const float* delta,
                const T* dout, TokenTags qt, TokenTags kt, float* dq, float* dk, float* dv) {
    if (onednn_) onednn_->backward(d, q, k, v, lse, delta, dout, qt, kt, dq, dk, dv);
    else flash_->backward(d, q, k, v, lse, delta, dout, qt, kt, dq, dk, dv);
  }
  // Called by thread 0 between tiles (fused) or tasks (oneDNN) while a kernel runs.
  void set_progress(std::function<void()> hook);

  AttnKernel which() const { return onednn_ ? AttnKernel::OneDnn : AttnKernel::Fused; }
  Precision products() const;
  size_t workspace_bytes() const;
  static size_t workspace_bytes_for(AttnKernel which, const AttnLimits& limits, AttnBlocks blocks, int threads,
                                    Precision products);

 private:
  std::unique_ptr<FlashAttention> flash_;
  std::unique_ptr<OneDnnAttention> onednn_;
};

}  // namespace lct
