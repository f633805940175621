#include "app/training/attention_choice.hpp"

#include <algorithm>
#include <iomanip>
#include <ostream>
#include <random>

#include "common/error.hpp"
#include "common/stats.hpp"
#include "io/checkpoint.hpp"
#include "io/run_dir.hpp"
#include "kernels/attention_kernel.hpp"
#include "parallel/world.hpp"

namespace lct {

namespace {

constexpr double kClearlyFaster = 0.9;  // oneDNN's time at most this share of the fused kernel's

// The path recorded by the checkpoint a --resume would start from ("" when none is, or when
// the run starts fresh): rank 0 looks, every rank gets its answer. An unreadable checkpoint
// says nothing here; the resume itself reports it.
std::string resumed_kernel(const World& world, const TrainOptions& o) {
  std::string name;
  if (world.root() && o.resume != "none") {
    try {
      const std::string path = o.resume == "auto" ? RunDirectory(o.run_dir, false).latest() : o.resume;
      if (!path.empty())
        if (const std::optional<TrainState> s = read_checkpoint_state(path)) name = s->attention_kernel;
    } catch (const Error&) {
    }
  }
  return broadcast_string(name, world.comm);
}

// Median seconds of a forward and backward of T causal tokens with this rank's heads, blocks,
// ISA and precision on path k.
template <class X>
double time_path(AttnKernel k, int64_t T, int64_t H, int64_t KV, int64_t D, const ModelShape& shape) {
  std::mt19937 gen(7);
  std::normal_distribution<float> n(0.0f, 1.0f);
  const auto random = [&](int64_t size) {
    std::vector<X> x(static_cast<size_t>(size));
    for (X& e : x) store_as(&e, n(gen));
    return x;
  };
  const std::vector<X> q = random(T * H * D), k_ = random(T * KV * D), v = random(T * KV * D), dout = random(T * H * D);
  std::vector<int32_t> idx(static_cast<size_t>(T)), doc(static_cast<size_t>(T), 0);
  for (int64_t i = 0; i < T; ++i) idx[size_t(i)] = int32_t(i);
  const TokenTags tags{idx.data(), doc.data()};
  const AttnDims d{T, T, H, KV, D};
  AttentionKernel kernel({T, T, H, KV, D}, shape.blocks, shape.isa, shape.precision, k);
  std::vector<float> o(q.size()), lse(size_t(H * T)), delta(lse.size()), dq(q.size()), dk(k_.size()), dv(k_.size());
  std::vector<X> ox(o.size());
  return median_seconds(3, [&] {
    kernel.forward(d, q.data(), k_.data(), v.data(), tags, tags, o.data(), lse.data());
    for (size_t i = 0; i < o.size(); ++i) store_as(&ox[i], o[i]);
    attention_delta(ox.data(), dout.data(), T, H, D, delta.data());
    kernel.backward(d, q.data(), k_.data(), v.data(), lse.data(), delta.data(), dout.data(), tags, tags, dq.data(),
                    dk.data(), dv.data());
  });
}

}  // namespace

AttnKernel choose_attention_kernel(const Context& ctx, const ParallelPlan& plan, const TrainInputs& in,
                                   std::ostream& out) {
  const TrainOptions& o = ctx.inv.train;
  const std::string recorded = resumed_kernel(ctx.world, o);
  AttnKernel k = AttnKernel::Fused;
  if (o.attention_kernel) {
    k = *o.attention_kernel;
    out << "attention kernel: " << attn_kernel_name(k) << " (--attention-kernel)";
    if (!recorded.empty() && recorded != attn_kernel_name(k))
      out << "; the checkpoint it resumes from was trained with " << recorded
          << ": the losses follow that run's to rounding, not bit for bit";
    out << "\n";
  } else if (!recorded.empty()) {
    k = recorded == attn_kernel_name(AttnKernel::OneDnn) ? AttnKernel::OneDnn : AttnKernel::Fused;
    out << "attention kernel: " << recorded << " (--attention-kernel auto: the checkpoint's, so that the resume "
        << "repeats its run's bits)\n";
  } else {
    // A forward and backward of this rank's attention: its heads (a tp rank's), up to 4,096 of
    // its tokens, timed on rank 0's threads; its choice is every rank's.
    const ModelConfig& mc = in.config();
    const int64_t T = std::min<int64_t>(in.shape.max_tokens, 4096), H = mc.num_attention_heads / plan.tp,
                  KV = mc.num_key_value_heads / plan.tp, D = mc.head_dim();
    std::vector<int64_t> ms(2, 0);
    if (ctx.world.root()) {
      const auto time = [&](AttnKernel path) {
        const double s = in.shape.precision == Precision::Bf16 ? time_path<bf16>(path, T, H, KV, D, in.shape)
                                                               : time_path<float>(path, T, H, KV, D, in.shape);
        return int64_t(s * 1e6);
      };
      ms = {time(AttnKernel::Fused), time(AttnKernel::OneDnn)};
    }
    ms = broadcast_ints(ms, ctx.world.comm);
    // oneDNN's path only where it has a matrix engine to run (bf16 on AMX) and is clearly
    // faster there: elsewhere its matmuls use the same FMA units as the fused kernel, and a
    // choice made on timings alone could differ between two runs of one command near a tie,
    // where lctrain's runs repeat bit for bit.
    const bool engine = in.shape.precision == Precision::Bf16 && ctx.topo.cpu.amx_bf16;
    k = engine && double(ms[1]) < kClearlyFaster * double(ms[0]) ? AttnKernel::OneDnn : AttnKernel::Fused;
    out << std::fixed << std::setprecision(1) << "attention kernel: " << attn_kernel_name(k)
        << " (--attention-kernel auto: a forward and backward of " << T << " tokens, " << H << " heads, took "
        << double(ms[0]) / 1e3 << " ms fused and " << double(ms[1]) / 1e3 << " ms through oneDNN on rank 0's "
        << ctx.topo.threads << " threads; "
        << (engine ? "the faster, oneDNN's only at 0.9x or less" : "oneDNN's path is taken only in bf16 on AMX")
        << ")\n";
  }
  attention_kernel_setup(k);
  return k;
}

}  // namespace lct
