#include "kernels/attention_kernel.hpp"

#include <atomic>

namespace lct {

namespace {
std::atomic<AttnKernel> g_kernel{AttnKernel::Fused};
}  // namespace

void attention_kernel_setup(AttnKernel k) { g_kernel = k; }
AttnKernel attention_kernel() { return g_kernel; }

AttentionKernel::AttentionKernel(const AttnLimits& limits, AttnBlocks blocks, Isa isa, Precision products,
                                 AttnKernel which) {
  if (which == AttnKernel::OneDnn) onednn_ = std::make_unique<OneDnnAttention>(limits, blocks, isa, products);
  else flash_ = std::make_unique<FlashAttention>(limits, blocks, isa, products);
}

void AttentionKernel::set_progress(std::function<void()> hook) {
  if (onednn_) onednn_->set_progress(std::move(hook));
  else flash_->set_progress(std::move(hook));
}

Precision AttentionKernel::products() const { return onednn_ ? onednn_->products() : flash_->products(); }

size_t AttentionKernel::workspace_bytes() const {
  return onednn_ ? onednn_->workspace_bytes() : flash_->workspace_bytes();
}

size_t AttentionKernel::workspace_bytes_for(AttnKernel which, const AttnLimits& limits, AttnBlocks blocks,
                                            int threads, Precision products) {
  return which == AttnKernel::OneDnn ? OneDnnAttention::workspace_bytes_for(limits, blocks, threads, products)
                                     : FlashAttention::workspace_bytes_for(limits, blocks, threads);
}

}  // namespace lct
