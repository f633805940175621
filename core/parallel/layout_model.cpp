#include "parallel/layout_model.hpp"

#include <algorithm>
#include <cmath>

#include "parallel/cp_attention.hpp"
#include "parallel/zero/zero_variant.hpp"
#include "train/optimizer.hpp"

namespace lct {

int64_t Layout::ranks_sharing_state() const {
  return zero_variant(plan.zero, replicas()).splits_moments ? replicas() : 1;
}

namespace {
// What the ZeRO variant holds and sends on one rank of the layout.
ZeroCost zero_cost(const ModelConfig& mc, const Layout& l, Precision wire, double whole_params_grads,
                   double micro_batches) {
  const ParamLayout layout = ParamLayout::llama(mc, int(l.plan.tp));
  const int ranks = int(l.replicas());
  if (ranks < 2) return {whole_params_grads};
  return zero_variant(l.plan.zero, ranks).cost({mc, layout, ranks, wire, micro_batches, whole_params_grads});
}
}  // namespace

RankMemory estimate_rank_memory(const ModelConfig& mc, const ModelShape& shape, const Layout& l) {
  // --tp: a rank's slices of the weights, and the activations and cp buffers of its heads.
  const ModelMemory m = LlamaModel::memory(mc, shape, int(l.threads), int(l.plan.tp));
  const int64_t Tl = shape.max_tokens;
  RankMemory r;
  // The ZeRO variant decides what of the parameters and gradients a rank holds (ZeRO-3: a
  // shard and the units gathered for the pass) and its reduction's buffers.
  const ZeroCost zero = zero_cost(mc, l, shape.precision, double(m.params_grads), double(l.grad_accum));
  r.params_grads = zero.params_grads;
  r.optimizer = double(m.optimizer) / double(l.ranks_sharing_state());
  if (l.optimizer_offloaded) {  // in memory: the chunks streaming through the update
    r.optimizer_offloaded = r.optimizer;
    r.optimizer = std::min(r.optimizer, double(AdamW::kStreamWindowBytes));
  }
  r.master_offloaded = double(m.master_offloaded);
  r.activations = double(m.activations);
  r.offloaded = double(m.offloaded);
  // A step's micro-batches are all built before its first forward pass (the loss is
  // normalised by the whole step's targets): 5 int32 per token each, plus the whole
  // sequences of the one being split over cp.
  // Balanced over dp x cp (--balance cost), a micro-batch is built from every dp rank's
  // sequences before each rank takes its share.
  const double built = double(l.micro_batch) * double(l.seq_len) * double(l.plan.balances() ? l.plan.dp : 1);
  r.batches = 20.0 * (double(l.grad_accum) * double(Tl) + built);
  // The cp group's attention and, balanced over dp > 1, the ring over the dp x cp ranks
  // that runs the micro-batches whose documents are spread.
  const bool spreads = l.plan.balances() && l.plan.dp > 1;
  const double cp_buffers = cp_attention_bytes(l.plan, mc, Tl, shape.precision) +
                            (spreads ? cp_attention_bytes(l.plan.spread_plan(), mc, Tl, shape.precision) : 0);
  r.scratch = double(m.scratch) + cp_buffers + zero.scratch;
  // What start-up holds beyond what a step holds. Checkpoints are written and read by parts
  // (each rank its own blocks, straight from and into its own buffers), so neither a write
  // nor a resume holds a whole copy: only start-up holds anything extra. It reads the model
  // file's fp32 weights whole and, under --tp, cuts this rank's slices into a buffer of their
  // own (P); both are freed before the AdamW moments are allocated (cmd_train), and under
  // ZeRO-3 before the model's activations and scratch too. The peak is the larger of
  // start-up and a step: a step's total plus what start-up holds beyond what it has not
  // allocated yet (nothing on one rank, under ZeRO over dp, or ZeRO-3; about P under tp).
  const double P = double(ParamLayout::llama(mc, int(l.plan.tp)).total) * 4;
  const double whole = double(ParamLayout::llama(mc).total) * 4;
  const double startup = whole + (l.plan.tp > 1 ? P : 0.0);
  const double not_yet = r.optimizer + (zero.allocates_after_startup ? r.activations + double(m.scratch) : 0.0);
  r.transient = std::max(0.0, startup - not_yet);
  r.process = l.process_bytes;
  return r;
}

double sequence_pairs(int64_t S, int64_t window) {
  const double s = double(S);
  if (window <= 0 || window >= S) return s * (s + 1) / 2;
  const double w = double(window);  // positions i < W see i + 1 keys, the rest W
  return w * (w + 1) / 2 + (s - w) * w;
}

Rates rates_for_threads(const Rates& one, const Rates& many, int threads) {
  const double span = std::log2(double(many.threads)) - std::log2(double(one.threads));
  const double f = span > 0 ? std::clamp((std::log2(double(threads)) - std::log2(double(one.threads))) / span, 0.0, 1.0) : 1.0;
  // Core-seconds (seconds x threads) blend; the result is for `threads` threads.
  auto blend = [&](double a, double b) {
    const double cs = (1 - f) * a * one.threads + f * b * many.threads;
    return cs / threads;
  };
  Rates r = many;
  r.threads = threads;
  r.layer_token_s = blend(one.layer_token_s, many.layer_token_s);
  r.head_token_s = blend(one.head_token_s, many.head_token_s);
  r.attn_pair_s = blend(one.attn_pair_s, many.attn_pair_s);
  r.adam_param_s = blend(one.adam_param_s, many.adam_param_s);
  r.layer_fwd_share = (1 - f) * one.layer_fwd_share + f * many.layer_fwd_share;
  r.attn_fwd_share = (1 - f) * one.attn_fwd_share + f * many.attn_fwd_share;
  return r;
}

namespace {

// Seconds of a transfer of `bytes` between two ranks of a node: a copy the CPU makes.
double intra_s(const Rates& r, double bytes) { return bytes / (r.intra_gbs * 1e9); }

// The slowest hop of a group of `n` consecutive ranks decides a synchronous exchange: one
// across nodes when the group does not fit in a node (its ranks share the node's link).
bool spans_nodes(const Layout& l, int64_t n) { return n > l.ranks_per_node && l.nodes > 1; }

double link_s(const Rates& r, const Layout& l, int64_t n, double bytes, double messages) {
  if (!spans_nodes(l, n)) return intra_s(r, bytes);
  const int64_t sharing = std::min(l.ranks_per_node, n);  // ranks of a node on the link at once
  return bytes * double(sharing) / (r.inter_gbs * 1e9) + messages * r.inter_latency_s;
}

// The replicas of one node when the gradient all-reduce runs hierarchically across nodes
// (parallel/reducer.hpp: several nodes, several replicas on each), else 0.
int64_t hierarchical_replicas_per_node(const Layout& l, const ZeroCost& zero) {
  const int64_t per = l.ranks_per_node / l.plan.tp;  // tp innermost: a node holds whole tp groups
  const bool applies = zero.all_reduce && l.plan.grad_reduce == GradReduce::Hierarchical && l.nodes > 1 &&
                       per > 1 && l.ranks_per_node % l.plan.tp == 0;
  return applies ? per : 0;
}

// A hierarchical all-reduce of `grad` bytes over `per` replicas on each of `nodes` nodes:
// a reduce-scatter and an all-gather inside the node ((per - 1) / per of them each, copies),
// and across the nodes each rank's 1/per part all-reduced, the node's ranks together sending
// 2 (nodes - 1) / nodes of the gradients over its link.
double hierarchical_allreduce_s(const Rates& r, double grad, int64_t per, int64_t nodes) {
  const double p = double(per), n = double(nodes);
  return intra_s(r, 2 * (p - 1) / p * grad) + 2 * (n - 1) / n * grad / (r.inter_gbs * 1e9) +
         2 * (n - 1) * r.inter_latency_s;
}

}  // namespace

namespace {

// One layer of one micro-batch on a rank, forward + backward, as predict_step counts it.
struct LayerCost {
  double attn_s, attn_mult;     // attention (fwd+bwd) and its recomputation factor
  double rest_s, rest_mult;     // everything else, and its recomputation factor
};

LayerCost layer_cost(const ModelConfig& mc, const Layout& l, const Rates& r) {
  // --tp: a rank computes 1/tp of every layer (its heads, SwiGLU rows and vocabulary rows;
  // the norms, repeated on every tp rank, are left out) and carries its heads on the cp links.
  const double tp = double(l.plan.tp);
  const double scale = double(r.threads) / double(l.threads);  // measured threads -> this rank's
  const double pairs = double(l.micro_batch) * sequence_pairs(l.seq_len, mc.sliding_window) /
                       double(l.plan.cp);  // a rank's share: zigzag balances causal work
  LayerCost c;
  // Recomputation: attention checkpointing runs the attention forward again, full
  // checkpointing the whole layer's forward. A tiled MLP makes its gate and up products again
  // in the backward pass (mlp.hpp), but under full checkpointing, which makes them anyway.
  c.attn_mult = l.checkpointing == Checkpointing::None ? 1.0 : 1.0 + r.attn_fwd_share;
  c.rest_mult = l.checkpointing == Checkpointing::Full ? 1.0 + r.layer_fwd_share : 1.0;
  if (l.mlp_tile > 0 && l.mlp_tile < l.local_tokens() && l.checkpointing != Checkpointing::Full) {
    // gate and up forward, of the layer's forward + backward products (3x the forward's)
    const double C = double(mc.hidden_size), I = double(mc.intermediate_size), D = double(mc.head_dim());
    const double attn_proj = C * D * double(2 * mc.num_attention_heads + 2 * mc.num_key_value_heads);
    c.rest_mult += 2 * C * I / (3 * (3 * C * I + attn_proj));
  }
  c.attn_s = pairs * r.attn_pair_s * scale / tp;
  c.rest_s = double(l.local_tokens()) * r.layer_token_s * scale / tp;
  return c;
}

}  // namespace

LayerSeconds layer_seconds(const ModelConfig& mc, const Layout& l, const Rates& r) {
  const LayerCost c = layer_cost(mc, l, r);
  const double fwd = c.attn_s * r.attn_fwd_share + c.rest_s * r.layer_fwd_share;
  return {fwd, c.attn_s * c.attn_mult + c.rest_s * c.rest_mult - fwd};
}

double tier_move_s(const Layout& l, double bytes) {
  return l.tier_gbs > 0 ? bytes * double(l.ranks_per_node) / (l.tier_gbs * 1e9) : 0.0;
}

StepPrediction predict_step(const ModelConfig& mc, const Layout& l, const Rates& r) {
  StepPrediction p;
  const double tp = double(l.plan.tp);
  const double L = double(mc.num_hidden_layers);
  const double scale = double(r.threads) / double(l.threads);  // measured threads -> this rank's
  const double micro = double(l.grad_accum);
  const double Tl = double(l.local_tokens());
  const LayerCost lc = layer_cost(mc, l, r);
  const double attn_s = lc.attn_s, attn_mult = lc.attn_mult, layer_mult = lc.rest_mult;
  p.compute_s = micro * (L * (lc.rest_s * layer_mult + attn_s * attn_mult) + Tl * r.head_token_s * scale / tp);

  // Activation offload: a moved set is saved during the next layer's forward and loaded
  // during a later layer's backward (activation_offload.hpp); what a layer does not hide shows.
  if (l.offload_layers > 0) {
    const LayerSeconds ls = layer_seconds(mc, l, r);
    const double move = tier_move_s(l, l.offload_set_bytes);
    p.offload_bytes = micro * double(l.offload_layers) * 2 * l.offload_set_bytes;
    p.offload_s = micro * double(l.offload_layers) *
                  (std::max(0.0, move - ls.forward) + std::max(0.0, move - ls.backward));
  }

  // Tensor parallelism: all-reduces of [T, C] fp32 over the tp ranks of a node (a ring sends
  // 2 (tp - 1) / tp of them): per layer 2 forward (after o_proj, down_proj), 2 backward (the
  // q/k/v and gate/up input gradients), 2 more for a recomputed forward; per micro-batch
  // the embedding's and the LM head's input gradient.
  if (l.plan.tp > 1) {
    const double per = 2 * (tp - 1) / tp * Tl * double(mc.hidden_size) * 4;
    const double count = L * (layer_mult > 1 ? 6 : 4) + 2;
    p.tp_bytes = micro * count * per;
    p.tp_s = link_s(r, l, l.plan.tp, p.tp_bytes, micro * count * 2 * (tp - 1));
  }

  // Context parallelism, per layer and micro-batch, as the cp algorithm moves it
  // (cp_attention.cpp). Inside a node a hop is a copy the CPU makes: all of it shows. What the
  // network moves while attention computes shows only where it takes longer.
  const CpTraffic cp = cp_attention_traffic(l.plan, mc, l.local_tokens(), l.precision,
                                            l.checkpointing != Checkpointing::None);
  if (cp.bytes > 0) {
    p.cp_bytes = micro * L * cp.bytes;
    const double comm = link_s(r, l, l.plan.cp, cp.bytes, cp.messages);
    const double hidden = cp.overlaps_attention && spans_nodes(l, l.plan.cp) ? attn_s * attn_mult : 0.0;
    p.cp_exposed_s = micro * L * std::max(0.0, comm - hidden);
  }

  // Model state over the dp x cp ranks, as the ZeRO variant moves it (parallel/zero/): none
  // of it overlaps compute on a CPU, so all of it counts. (--tp: each tp rank's slices.)
  const double W = double(l.replicas()), params = double(ParamLayout::llama(mc, int(l.plan.tp)).total);
  if (W > 1) {
    const ZeroCost zero = zero_cost(mc, l, l.precision, 0, micro);
    p.grad_bytes = zero.wire_bytes;
    p.grad_s = link_s(r, l, l.world(), p.grad_bytes, zero.messages);
    if (const int64_t per = hierarchical_replicas_per_node(l, zero); per > 0) {
      const double grad = p.grad_bytes * W / (2 * (W - 1));  // the whole gradient, as it travels
      const double nodes = W / double(per);
      p.grad_bytes = 2 * (double(per) - 1) / double(per) * grad + 2 * (nodes - 1) / nodes * grad / double(per);
      p.grad_s = hierarchical_allreduce_s(r, grad, per, int64_t(nodes));
    }
  }
  p.optimizer_s = params / double(l.ranks_sharing_state()) * r.adam_param_s * scale;
  // On a tier the update reads and writes the moments (and the master, which the bf16 copy's
  // refresh reads once more) as it goes: nothing else runs meanwhile, so all of it counts.
  // Unknown rate (0): not counted.
  if (l.optimizer_offloaded) {
    const double shard = params / double(l.ranks_sharing_state());
    p.optimizer_s += tier_move_s(l, shard * 4 * (2 * 2 + (l.master_offloaded ? 3 : 0)));
  }
  return p;
}

}  // namespace lct
