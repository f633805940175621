// lctrain plan: every layout of a training job on a given machine (ranks per node, cp, dp,
// ZeRO stage, cp algorithm, checkpointing, micro-batch, precision), ranked by predicted step
// time, with each one's memory per rank and traffic per step. Memory comes from the same
// estimate `train` checks at start-up; time from per-core rates measured here on the model's
// own layers (one layer of it with the embedding and LM head, the attention kernel, AdamW) on
// one thread and on all of this rank's, and link rates
// measured here (a copy between ranks of a node is a memcpy) or given (the network).
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "app/cli/context.hpp"
#include "app/cli/parallel_options.hpp"
#include "app/commands/plan_calibration.hpp"
#include "app/training/train_setup.hpp"
#include "common/error.hpp"
#include "io/model_file.hpp"
#include "parallel/layout_model.hpp"
#include "model/activation_offload.hpp"
#include "parallel/zero/zero_variant.hpp"
#include "sys/memory.hpp"
#include "sys/tier_store.hpp"

namespace lct {

namespace {

// The divisors of n, ascending, from its prime factors: trial division to sqrt(n) only, so
// that a count of ranks in the billions still answers at once.
std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d{1};
  auto multiply = [&d](int64_t p, int k) {  // every divisor so far times p^1..p^k
    const size_t have = d.size();
    int64_t pk = 1;
    for (int e = 1; e <= k; ++e) {
      pk *= p;
      for (size_t i = 0; i < have; ++i) d.push_back(d[i] * pk);
    }
  };
  for (int64_t p = 2; p <= n / p; ++p) {
    int k = 0;
    for (; n % p == 0; n /= p) ++k;
    if (k) multiply(p, k);
  }
  if (n > 1) multiply(n, 1);
  std::sort(d.begin(), d.end());
  return d;
}

// "a,b" -> {"a", "b"} (an empty string is one empty item).
std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  for (size_t a = 0; a <= s.size();) {
    const size_t b = std::min(s.find(',', a), s.size());
    out.push_back(s.substr(a, b - a));
    a = b + 1;
  }
  return out;
}

// "a,b" -> {"a", "b"}, each one of `allowed`, at least one: else one message naming `flag`.
std::vector<std::string> split_list(const std::string& s, const std::string& flag,
                                    const std::vector<std::string>& allowed) {
  std::string names;
  for (const std::string& a : allowed) names += (names.empty() ? "" : ", ") + a;
  const std::vector<std::string> out = split_commas(s);
  for (const std::string& item : out)
    if (std::find(allowed.begin(), allowed.end(), item) == allowed.end())
      fail("plan ", flag, " '", s, "': '", item, "' is not one of ", names, " (a comma-separated list)");
  return out;
}

// What one rank of a node may use: 95% of its share of the node's memory, the margin train
// keeps too.
double rank_budget(double mem_node, int64_t ranks_per_node) { return 0.95 * mem_node / double(ranks_per_node); }

struct Candidate {
  Layout layout;
  RankMemory memory;
  StepPrediction time;
};

// A tier the activations may wait on: what train's --offload-activations takes (`flag`), and
// what it moves per node each way.
struct Tier {
  std::string flag;
  TierSpec spec;
  double gbs = 0;
  bool on() const { return spec.on(); }
};

// The layout as the flags that run it.
std::string layout_flags(const Layout& l, const Tier& tier) {
  const ParallelPlan& p = l.plan;
  return cat(l.ranks_per_node, " rank(s)/node x --threads ", l.threads, ": train --tp ", p.tp,
             p.sequence_parallel ? " --tp-sequence-parallel" : "", " --cp ", p.cp, " --dp ", p.dp,
             " --zero ", p.zero, p.cp > 1 ? cat(" --cp-algo ", cp_algo_name(p.cp_algo)) : std::string(),
             " --checkpointing ", to_string(l.checkpointing), " --precision ",
             l.precision == Precision::Bf16 ? "bf16" : "fp32", " --batch-size ", l.micro_batch,
             " --grad-accum ", l.grad_accum, l.mlp_tile > 0 ? cat(" --mlp-tile ", l.mlp_tile) : std::string(),
             l.offload_layers > 0 ? cat(" --offload-activations ", tier.flag, " --offload-layers ", l.offload_layers)
                                  : std::string(),
             l.optimizer_offloaded ? cat(" --offload-optimizer ", tier.flag) : std::string(),
             l.master_offloaded ? " --offload-master-weights" : "");
}

// Why a layout was ruled out, counted so that an empty plan names the rule to change.
enum Rule { TpSplit, SeqLen, Batch, Ulysses, Tokens, Memory, kRules };

struct Enumeration {
  std::vector<Candidate> fits;
  std::array<int64_t, kRules> ruled_out{};
};

template <class E>
std::vector<std::string> names_of(const Choices<E>& choices) {
  std::vector<std::string> names;
  for (const auto& [n, v] : choices) names.push_back(n);
  return names;
}

struct Candidates {  // the candidates the comma-separated flags list
  std::vector<Precision> precisions;
  std::vector<Checkpointing> policies;
  std::vector<int64_t> zeros;
  std::vector<CpAlgo> algos;
  std::vector<int64_t> mlp_tiles;
};

// "0,2048" -> {0, 2048}: non-negative token counts, else one message naming the flag.
std::vector<int64_t> split_counts(const std::string& s, const std::string& flag) {
  std::vector<int64_t> out;
  for (const std::string& item : split_commas(s)) {
    char* end = nullptr;
    const long long v = item.empty() ? -1 : std::strtoll(item.c_str(), &end, 10);
    if (v < 0 || *end != '\0' || v > INT32_MAX)
      fail("plan ", flag, " '", s, "': '", item, "' is not a count of tokens (a comma-separated list, 0 = untiled)");
    out.push_back(v);
  }
  return out;
}

Candidates parse_candidates(const PlanOptions& o) {
  Candidates c;
  for (const std::string& p : split_list(o.precision, "--precision", names_of(precision_choices())))
    c.precisions.push_back(choice_of(precision_choices(), p));
  for (const std::string& k : split_list(o.checkpointing, "--checkpointing", names_of(checkpointing_choices())))
    c.policies.push_back(choice_of(checkpointing_choices(), k));
  std::vector<std::string> stages;
  for (int64_t z : zero_stages()) stages.push_back(std::to_string(z));
  for (const std::string& z : split_list(o.zero, "--zero", stages)) c.zeros.push_back(std::stoll(z));
  // allgather and hybrid are not modelled: their traffic lies between ring's and Ulysses'.
  for (const std::string& a : split_list(o.cp_algo, "--cp-algo", {"ring", "ulysses"}))
    c.algos.push_back(parse_cp_algo(a));
  c.mlp_tiles = split_counts(o.mlp_tile, "--mlp-tile");
  return c;
}

// Whether the layout fits in `budget` bytes per rank: in memory or, with a tier, with as little
// moved there as makes it fit. First as few of its first layers' activations as fit
// (l.offload_layers; their moves hide behind compute), then with the AdamW moments there too
// (their streaming adds to the update), then, in bf16 with the whole master on each rank, the
// fp32 master weights as well.
bool fits_memory(Layout& l, ModelShape shape, const ModelConfig& mc, const Tier& tier, double budget, RankMemory& mem) {
  const int64_t most = tier.on() ? ActivationOffload::movable(mc.num_hidden_layers) : 0;
  const bool master_can = l.precision == Precision::Bf16 && l.plan.keeps_whole_master();
  const int stages = !tier.on() ? 1 : master_can ? 3 : 2;  // nothing, + moments, + master
  for (int stage = 0; stage < stages; ++stage) {
    l.optimizer_offloaded = stage >= 1;
    l.master_offloaded = stage >= 2;
    shape.master_tier = l.master_offloaded ? tier.spec : TierSpec{};
    for (int64_t m = 0; m <= most; ++m) {
      shape.offload_activations = m > 0 ? tier.spec : TierSpec{};
      shape.offload_layers = m;
      mem = estimate_rank_memory(mc, shape, l);
      if (mem.total() <= budget) {
        l.offload_layers = m;
        l.offload_set_bytes = m > 0 ? mem.offloaded / double(m) : 0.0;
        return true;
      }
    }
  }
  return false;
}

// Every layout of one split of the ranks (`base`: nodes, ranks per node, threads, tp, cp, dp)
// that the flags allow and train would accept, into e.fits when it fits in memory.
void add_layouts(const Layout& base, const PlanOptions& o, const Candidates& ch, const ModelConfig& mc,
                 const Context& ctx, const Tier& tier, double mem_node, Enumeration& e) {
  for (Precision precision : ch.precisions)
    for (CpAlgo algo : ch.algos) {
      if (base.plan.cp == 1 && algo != ch.algos.front()) continue;  // no cp: the algorithm is moot
      ParallelPlan with_algo = base.plan;
      with_algo.cp_algo = algo;
      if (with_algo.broken_rule(mc, precision) == PlanRule::UlyssesHeads) {
        ++e.ruled_out[Ulysses];
        continue;
      }
      for (int64_t zero : ch.zeros)
        for (Checkpointing ck : ch.policies)
          for (int64_t mb : divisors(o.global_batch / base.plan.dp))
            for (bool sp : {false, true})
              for (int64_t tile : ch.mlp_tiles) {
              if (zero >= 1 && base.plan.replicas() == 1) continue;  // one dp x cp rank: nothing to shard
              Layout l = base;
              l.plan = with_algo;
              l.plan.sequence_parallel = sp;
              l.plan.zero = zero;
              l.micro_batch = mb;
              l.grad_accum = o.global_batch / base.plan.dp / mb;
              l.checkpointing = ck;
              l.precision = precision;
              l.mlp_tile = tile;
              // What train refuses (sequence parallelism without tp or with uneven tokens,
              // ZeRO-3 with it or with bf16) is no candidate.
              if (l.plan.broken_rule(mc, precision) != PlanRule::None ||
                  l.plan.broken_rule(o.seq_len, mb) != PlanRule::None)
                continue;
              if (l.local_tokens() > INT32_MAX) {
                ++e.ruled_out[Tokens];
                continue;
              }
              if (tile > 0 && tile >= l.local_tokens()) continue;  // the same as untiled
              ModelShape shape{l.local_tokens(), o.seq_len, ck, {128, 128}, ctx.attention_isa(precision),
                               precision, sp};
              shape.mlp_tile = tile;
              Candidate c{l, {}, {}};
              if (!fits_memory(c.layout, shape, mc, tier, rank_budget(mem_node, l.ranks_per_node), c.memory)) {
                ++e.ruled_out[Memory];
                continue;
              }
              e.fits.push_back(c);
            }
    }
}

// Every split of the job's ranks into ranks per node x tp x cp x dp, then every layout of each.
Enumeration enumerate_layouts(const PlanOptions& o, const Candidates& ch, const ModelConfig& mc, const Context& ctx,
                              const Tier& tier, int64_t cores, double mem_node, double process_bytes) {
  Enumeration e;
  for (int64_t rpn : divisors(cores))
    for (int64_t tp : divisors(rpn)) {  // tp inside a node (its all-reduces block every layer)
      ParallelPlan plan;
      plan.tp = tp;
      if (plan.broken_rule(mc, Precision::Fp32) == PlanRule::TpSplit) {  // heads, KV heads, I or vocabulary
        ++e.ruled_out[TpSplit];
        continue;
      }
      for (int64_t cp : divisors(o.nodes * rpn / tp)) {
        plan.cp = cp;
        if (plan.broken_rule(o.seq_len, 1) == PlanRule::SeqLenSplit) {
          ++e.ruled_out[SeqLen];
          continue;
        }
        plan.dp = o.nodes * rpn / (cp * tp);
        if (o.global_batch % plan.dp != 0) {
          ++e.ruled_out[Batch];
          continue;
        }
        Layout base;
        base.nodes = o.nodes;
        base.ranks_per_node = rpn;
        base.threads = cores / rpn;
        base.plan = plan;
        base.seq_len = o.seq_len;
        base.process_bytes = process_bytes;
        add_layouts(base, o, ch, mc, ctx, tier, mem_node, e);
      }
    }
  return e;
}

// Why no layout is left: memory when some passed every other rule, else the rules that
// ruled them all out, with their counts.
std::string no_layout_message(const PlanOptions& o, const Enumeration& e, double mem_node, int64_t cores) {
  const auto& n = e.ruled_out;
  if (n[Memory] > 0)
    return cat("no layout of ", o.global_batch, " x ", o.seq_len, " tokens per step fits in ", gib(mem_node),
               " per node (", n[Memory], " need more): use more nodes, a shorter --seq-len or a smaller model",
               o.offload_activations.empty() && o.tier_gbs == 0 ? ", or give a tier (--offload-activations DIR|numa:N)" : "",
               o.mlp_tile == "0" ? ", or consider a tiled MLP (--mlp-tile 0,4096)" : "");
  std::string why;
  auto add = [&why](int64_t k, const std::string& rule) {
    if (k > 0) why += cat(why.empty() ? "" : "; ", k, " ", rule);
  };
  add(n[Batch], cat("where dp (the ranks over cp x tp) does not divide --global-batch ", o.global_batch));
  add(n[SeqLen], cat("where 2 x cp does not divide --seq-len ", o.seq_len));
  add(n[TpSplit], "where tp does not divide the model's heads, KV heads, intermediate size or vocabulary");
  add(n[Ulysses], "where ulysses' cp does not divide a tp rank's heads");
  add(n[Tokens], "with more than 2^31 - 1 tokens per rank's micro-batch");
  return cat("no layout of ", o.global_batch, " x ", o.seq_len, " tokens per step on ", o.nodes, " node(s) x ",
             cores, " cores passes train's rules (", why, "): give a --global-batch that is a multiple of ",
             "the job's ranks (dp is at least nodes x ranks per node / (cp x tp)), fewer --nodes, or a ",
             "--seq-len with more factors of 2");
}

// Rates on this machine, per precision: on one thread and on all of this rank's (a rank of
// t threads gets rates in between), with the links given or measured.
std::map<Precision, std::pair<Rates, Rates>> measure_rates(const PlanOptions& o, const Candidates& ch,
                                                           const ModelConfig& mc, const Context& ctx,
                                                           std::ostream& out) {
  const int all = ctx.topo.threads;
  out << "measuring compute rates with the model's own layers on 1 and " << all << " thread(s)"
      << (mc.vocab_size > kCalibrationVocab
              ? cat(" (its LM head on ", kCalibrationVocab, " of its ", mc.vocab_size, " vocabulary rows, scaled)")
              : "")
      << "..." << std::endl;
  std::map<Precision, std::pair<Rates, Rates>> rates;
  const double copy_gbs = o.intra_gbs > 0 ? o.intra_gbs : measure_copy_gbs();
  Calibration adam_one, adam_many;  // fp32 whatever the precision: measured once
  for (Precision p : ch.precisions) {
    const double t0 = omp_get_wtime();
    omp_set_num_threads(1);
    Calibration one = measure_compute(mc, ctx, p);
    if (p == ch.precisions.front()) measure_adamw(adam_one);
    omp_set_num_threads(all);
    Calibration many = all > 1 ? measure_compute(mc, ctx, p) : one;
    if (p == ch.precisions.front() && all > 1) measure_adamw(adam_many);
    one.rates.adam_param_s = adam_one.rates.adam_param_s;
    many.rates.adam_param_s = all > 1 ? adam_many.rates.adam_param_s : adam_one.rates.adam_param_s;
    one.spread = std::max(one.spread, adam_one.spread);
    many.spread = std::max(many.spread, all > 1 ? adam_many.spread : adam_one.spread);
    for (Rates* r : {&one.rates, &many.rates}) {
      r->intra_gbs = copy_gbs;
      r->inter_gbs = o.inter_gbs;
      r->inter_latency_s = o.inter_latency_us * 1e-6;
      out << std::setprecision(3) << (p == Precision::Bf16 ? "bf16" : "fp32") << " on " << r->threads
          << " thread(s): per layer " << r->layer_token_s * 1e6 * r->threads << " core-us/token (forward "
          << 100 * r->layer_fwd_share << "%), rest " << r->head_token_s * 1e6 * r->threads
          << " core-us/token, attention " << r->attn_pair_s * 1e9 * r->threads << " core-ns/pair (forward "
          << 100 * r->attn_fwd_share << "%), AdamW " << r->adam_param_s * 1e9 * r->threads << " core-ns/parameter\n";
    }
    out << std::setprecision(1) << std::fixed << "  (" << omp_get_wtime() - t0 << " s)\n" << std::defaultfloat;
    if (const std::string w = calibration_warning(one, many); !w.empty()) out << w << "\n";
    out << std::flush;
    rates[p] = {one.rates, many.rates};
  }
  out << "links: between ranks of a node " << copy_gbs << " GB/s (" << (o.intra_gbs > 0 ? "given" : "one memcpy, measured")
      << "), between nodes " << o.inter_gbs << " GB/s per node, " << o.inter_latency_us << " us per message (given)\n";
  return rates;
}

// The tier of --offload-activations (or, with only --tier-gbs, a disk to be named: DIR), at its
// given rate or at the rate measured here.
Tier plan_tier(const PlanOptions& o, std::ostream& out) {
  Tier t;
  if (o.offload_activations.empty() && o.tier_gbs == 0) return t;
  t.flag = o.offload_activations.empty() ? "DIR" : o.offload_activations;
  t.spec = o.offload_activations.empty() ? TierSpec{TierSpec::Kind::Disk, "DIR", -1}
                                         : TierSpec::parse(o.offload_activations, "plan --offload-activations");
  t.gbs = o.tier_gbs;
  if (t.gbs == 0) {
    out << "measuring " << t.spec.describe() << ": 256 MiB written and read back, as train moves activations..."
        << std::endl;
    const TierRates r = measure_tier(t.spec, "plan --offload-activations");
    t.gbs = std::min(r.write_gbs, r.read_gbs);
    out << std::setprecision(3) << "tier: " << t.spec.describe() << " writes " << r.write_gbs << " GB/s, reads "
        << r.read_gbs << " GB/s (measured); planned at " << t.gbs << " GB/s per node\n" << std::defaultfloat;
  } else {
    out << "tier: " << t.spec.describe() << " at " << t.gbs << " GB/s per node each way (given)\n";
  }
  return t;
}

// Why each layer's activations stay, move or are made again in the chosen layout: one line per
// run of layers with the same choice, with the seconds that decided it.
void explain_layers(const Candidate& c, const ModelConfig& mc, const Rates& r, const Tier& tier, double budget,
                    std::ostream& out) {
  const Layout& l = c.layout;
  const int64_t L = mc.num_hidden_layers, m = l.offload_layers;
  const LayerSeconds ls = layer_seconds(mc, l, r);
  Layout full = l;  // the same layout recomputing every layer's forward
  full.checkpointing = Checkpointing::Full;
  full.offload_layers = 0;
  const double recompute = layer_seconds(mc, full, r).backward - ls.backward;
  const std::string what = l.checkpointing == Checkpointing::Full ? "its input (--checkpointing full)"
                           : cat("what --checkpointing ", to_string(l.checkpointing), " keeps");
  auto range = [](int64_t a, int64_t b) { return a == b ? cat("layer ", a) : cat("layers ", a, "-", b); };
  auto s3 = [](double x) {  // seconds, 3 significant digits
    std::ostringstream s;
    s << std::setprecision(3) << x;
    return s.str();
  };
  out << std::setprecision(3) << "\nper layer, layout 1:\n";
  if (m > 0) {
    const double move = tier_move_s(l, l.offload_set_bytes), shown = std::max(0.0, move - ls.forward) +
                                                                      std::max(0.0, move - ls.backward);
    out << "  " << range(0, m - 1) << ": offload " << what << ", " << gib(l.offload_set_bytes) << " a layer, to "
        << tier.spec.describe() << ": a move takes " << move << " s at " << tier.gbs / double(l.ranks_per_node)
        << " GB/s per rank, under a layer's " << ls.forward << " s forward and " << ls.backward << " s backward ("
        << (shown > 0 ? cat(s3(shown), " s of it shows") : std::string("hidden")) << ")"
        << (l.checkpointing == Checkpointing::Full ? std::string("; nothing more to recompute")
                                                   : cat("; recomputing instead (--checkpointing full) costs ",
                                                         s3(recompute), " s a layer"))
        << "\n";
  }
  out << "  " << range(m, L - 1) << ": keep " << what << " in memory"
      << (m > 0 ? cat(": the memory holds the rest (", gib(c.memory.total()), " of ", gib(budget), " per rank)")
                : cat(": it fits (", gib(c.memory.total()), " of ", gib(budget), " per rank)"))
      << (m > 0 && m == ActivationOffload::movable(L) ? cat("; the last ", ActivationOffload::kSlots, " always stay") : "")
      << "\n";
  if (l.optimizer_offloaded)
    out << "  AdamW moments" << (l.master_offloaded ? " and fp32 master weights" : "") << ": on " << tier.spec.describe()
        << " (" << gib(c.memory.optimizer_offloaded + c.memory.master_offloaded)
        << "), since the activations alone do not make room: the update streams them, " << s3(c.time.optimizer_s)
        << " s a step\n";
  out << std::defaultfloat;
}

// The table of layouts that fit, fastest first (fits sorted so): at most o.top rows, one per
// layout apart from its micro-batch.
void print_layouts(const std::vector<Candidate>& fits, const PlanOptions& o, const Tier& tier, double tokens,
                   std::ostream& out) {
  out << std::right << std::fixed
      << " #  step s  tokens/s  GiB/rank  compute  cp exposed  grad sync  tp sync  AdamW  tier s  cp MB  grad MB  tp MB  layout\n";
  // A larger micro-batch predicts the same time with more memory (the model is linear in
  // tokens): of layouts that differ only there, the first (least memory) is shown.
  std::set<std::string> shown;
  int64_t n = 0;
  for (const Candidate& c : fits) {
    Layout key = c.layout;
    key.micro_batch = key.grad_accum = 0;
    if (n == o.top || !shown.insert(layout_flags(key, tier)).second) continue;
    const StepPrediction& t = c.time;
    // Each column keeps a space before it, however wide its figure grows (a step of
    // thousands of seconds, a cp traffic of terabytes), so the rows stay parseable.
    auto col = [&out](int width, int digits, double v) {
      out << ' ' << std::setprecision(digits) << std::setw(width - 1) << v;
    };
    // Seconds keep two significant digits below 1 s: a small model's 2 ms step is 0.0021, not
    // 0.00 (a ratio against it would divide by zero).
    auto secs = [&col](int width, double v) {
      col(width, v > 0 && v < 1 ? int(std::clamp(1.0 - std::floor(std::log10(v)), 2.0, 6.0)) : 2, v);
    };
    out << std::setw(2) << ++n;
    secs(8, t.step_s());
    col(10, 0, tokens / t.step_s());
    col(10, 2, c.memory.total() / double(1u << 30));
    secs(9, t.compute_s);
    secs(12, t.cp_exposed_s);
    secs(11, t.grad_s);
    secs(9, t.tp_s);
    secs(7, t.optimizer_s);
    secs(8, t.offload_s);
    col(7, 0, t.cp_bytes / 1e6);
    col(9, 0, t.grad_bytes / 1e6);
    col(7, 0, t.tp_bytes / 1e6);
    out << "  " << layout_flags(c.layout, tier) << "\n";
  }
  out << std::defaultfloat << std::left;
  out << "predicted from per-core rates measured here (compute scaled by threads per rank) and the link rates above; "
         "memory is train's own start-up estimate\n";
}

}  // namespace

int cmd_plan(Context& ctx) {
  const PlanOptions& o = ctx.inv.plan;
  const double process_bytes = peak_rss_mib() * double(1 << 20);  // what a rank holds before it reads anything
  ctx.print_startup("plan", true);
  if (ctx.world.size != 1) fail("plan runs on one rank (it measures this machine's cores itself); start it without mpirun");
  const ModelConfig mc = o.model.empty() ? model_preset(o.preset) : read_model_file_config(o.model);
  std::ostream& out = ctx.out();

  // The machine: given, or this one.
  const int64_t cores = o.cores_per_node > 0 ? o.cores_per_node : ctx.topo.threads;
  const double mem_node = o.mem_per_node_gib > 0 ? o.mem_per_node_gib * double(1u << 30) : available_memory().bytes;
  const Candidates ch = parse_candidates(o);
  const Tier tier = plan_tier(o, out);
  Enumeration e = enumerate_layouts(o, ch, mc, ctx, tier, cores, mem_node, process_bytes);
  std::vector<Candidate>& fits = e.fits;
  const int64_t too_big = e.ruled_out[Rule::Memory];
  const double tokens = double(o.global_batch) * double(o.seq_len);
  if (fits.empty()) fail(no_layout_message(o, e, mem_node, cores));

  const std::map<Precision, std::pair<Rates, Rates>> rates = measure_rates(o, ch, mc, ctx, out);

  for (Candidate& c : fits) {
    const auto& [one, many] = rates.at(c.layout.precision);
    c.layout.tier_gbs = tier.gbs;
    c.time = predict_step(mc, c.layout, rates_for_threads(one, many, int(c.layout.threads)));
  }
  std::sort(fits.begin(), fits.end(), [](const Candidate& a, const Candidate& b) {
    return a.time.step_s() != b.time.step_s() ? a.time.step_s() < b.time.step_s()
                                              : a.memory.total() < b.memory.total();
  });

  out << "\nplan: " << o.nodes << " node(s) x " << cores << " cores, " << gib(mem_node) << " per node; "
      << "global batch " << o.global_batch << " x " << o.seq_len << " tokens; " << fits.size()
      << " layouts fit, " << too_big << " need more memory than a rank's share\n";
  print_layouts(fits, o, tier, tokens, out);
  if (tier.on()) {
    const Candidate& best = fits.front();
    const auto& [one, many] = rates.at(best.layout.precision);
    explain_layers(best, mc, rates_for_threads(one, many, int(best.layout.threads)), tier,
                   rank_budget(mem_node, best.layout.ranks_per_node), out);
  }
  return kExitOk;
}

}  // namespace lct
