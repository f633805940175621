#include "parallel/parallel_plan.hpp"

#include <climits>

#include "common/knobs.hpp"
#include "model/tp.hpp"

namespace lct {

namespace {

bool splits_heads(int64_t n, int64_t H, int64_t KV) { return H % n == 0 && (KV % n == 0 || n % KV == 0); }

// Degrees U that would work for hybrid: divide cp and split the heads (listed in its message).
std::string workable_degrees(int64_t cp, int64_t H, int64_t KV) {
  std::string s;
  for (int64_t u = 1; u <= cp; ++u)
    if (cp % u == 0 && splits_heads(u, H, KV)) s += (s.empty() ? "" : ", ") + std::to_string(u);
  return s;
}

}  // namespace

void check_ulysses_heads(int64_t cp, int64_t H, int64_t KV) {
  if (!splits_heads(cp, H, KV))
    throw PlanError(PlanRule::UlyssesHeads,
                    cat(knob_name(Knob::CpAlgo), " ulysses splits the heads over the ", cp, " cp ranks, but the model has ", H,
                        " query heads and ", KV, " key/value heads: the query heads must be divisible by cp, ",
                        "and the key/value heads by cp or cp by them (then replicated); use ", knob_name(Knob::CpAlgo),
                        " ring, or a cp that divides ", H, " and divides or is a multiple of ", KV));
}

void check_hybrid_degree(int64_t cp, int64_t U, int64_t H, int64_t KV) {
  if (U < 1 || cp % U != 0)
    throw PlanError(PlanRule::HybridDegree,
                    cat(knob_name(Knob::CpAlgo), " hybrid lays the ", cp, " cp ranks out as ", knob_name(Knob::UlyssesDegree),
                        " x ring, but ", knob_name(Knob::UlyssesDegree), " ", U, " does not divide ", knob_name(Knob::Cp), " ", cp,
                        "; use one of: ",
                        workable_degrees(cp, H, KV), " (usually the cp ranks on one node)"));
  if (!splits_heads(U, H, KV))
    throw PlanError(PlanRule::HybridDegree,
                    cat(knob_name(Knob::CpAlgo), " hybrid splits the heads over the ", knob_name(Knob::UlyssesDegree), " ", U,
                        " ranks, but the model has ", H, " query heads and ", KV, " key/value heads: the query ",
                        "heads must be divisible by ", knob_name(Knob::UlyssesDegree), ", and the key/value heads by it or ",
                        "it by them; use one of: ",
                        workable_degrees(cp, H, KV)));
}

const char* cp_algo_name(CpAlgo a) {
  switch (a) {
    case CpAlgo::Ring: return "ring";
    case CpAlgo::AllGather: return "allgather";
    case CpAlgo::Ulysses: return "ulysses";
    case CpAlgo::Hybrid: return "hybrid";
  }
  return "?";
}

const char* cp_transport_name(CpTransport t) {
  return t == CpTransport::Mpi ? "mpi" : t == CpTransport::Shm ? "shm" : "auto";
}

const char* cp_split_choice_name(CpSplitChoice s) {
  return s == CpSplitChoice::Zigzag ? "zigzag" : s == CpSplitChoice::Contiguous ? "contiguous" : "auto";
}

const char* grad_reduce_name(GradReduce g) {
  return g == GradReduce::Flat ? "flat" : "hierarchical";
}

const char* balance_name(Balance b) { return b == Balance::None ? "none" : "cost"; }

ParallelPlan ParallelPlan::spread_plan() const {
  ParallelPlan p = *this;
  p.cp = dp * cp;
  p.dp = 1;
  return p;
}

CpSplit ParallelPlan::split_for(int64_t window, int64_t seq_len) const {
  if (cp_split == CpSplitChoice::Zigzag) return CpSplit::Zigzag;
  if (cp_split == CpSplitChoice::Contiguous) return CpSplit::Contiguous;
  // Auto: contiguous where a sliding window fits in one ring position's share of a sequence
  // (0 < window <= S / positions): its chunks need one hop; zigzag (causal balance) otherwise.
  const int64_t positions = cp / shard_group();
  return window > 0 && window <= seq_len / positions ? CpSplit::Contiguous : CpSplit::Zigzag;
}

std::string ParallelPlan::cp_description() const {
  if (cp_algo != CpAlgo::Hybrid) return cp_algo_name(cp_algo);
  return cat("hybrid ulysses ", ulysses_degree, " x ring ", cp / ulysses_degree);
}

PlanRule ParallelPlan::broken_rule(const ModelConfig& mc, Precision precision) const {
  if (!tp_split_error(mc, tp).empty()) return PlanRule::TpSplit;
  if (sequence_parallel && tp == 1) return PlanRule::SequenceParallelWithoutTp;
  if (zero == 3 && sequence_parallel) return PlanRule::Zero3WithSequenceParallel;
  if (zero == 3 && precision != Precision::Fp32) return PlanRule::Zero3NotFp32;
  // With tp the cp attention works on each tp rank's heads.
  const int64_t H = mc.num_attention_heads / tp, KV = mc.num_key_value_heads / tp;
  if (cp_algo == CpAlgo::Ulysses && !splits_heads(cp, H, KV)) return PlanRule::UlyssesHeads;
  if (cp_algo != CpAlgo::Hybrid && ulysses_degree != 0) return PlanRule::UlyssesDegreeWithoutHybrid;
  if (cp_algo == CpAlgo::Hybrid) {
    if (ulysses_degree == 0) return PlanRule::HybridWithoutDegree;
    if (ulysses_degree < 1 || cp % ulysses_degree != 0 || !splits_heads(ulysses_degree, H, KV))
      return PlanRule::HybridDegree;
  }
  return PlanRule::None;
}

void ParallelPlan::check(const ModelConfig& mc, Precision precision) const {
  const PlanRule rule = broken_rule(mc, precision);
  const int64_t H = mc.num_attention_heads / tp, KV = mc.num_key_value_heads / tp;
  const int64_t U = ulysses_degree;
  switch (rule) {
    case PlanRule::None: return;
    case PlanRule::TpSplit: throw PlanError(rule, tp_split_error(mc, tp));
    case PlanRule::SequenceParallelWithoutTp:
      throw PlanError(rule, cat(knob_name(Knob::TpSequenceParallel), " splits the residual stream over the tp ranks, but ",
                                "this run has ", knob_name(Knob::Tp), " 1: add ", knob_name(Knob::Tp), " N (N > 1), or drop ",
                                knob_name(Knob::TpSequenceParallel)));
    case PlanRule::Zero3WithSequenceParallel:
      throw PlanError(rule, cat(knob_name(Knob::Zero), " 3 does not combine with ", knob_name(Knob::TpSequenceParallel),
                                " (the norm weights' gradients are summed over the tp group from whole ",
                                "arrays); use ", knob_name(Knob::Zero), " 0, 1 or 2 with it"));
    case PlanRule::Zero3NotFp32:
      throw PlanError(rule, cat(knob_name(Knob::Zero), " 3 trains in fp32 only (each gathered unit is used as fp32 ",
                                "master weights); use ", knob_name(Knob::Precision), " fp32, or ", knob_name(Knob::Zero),
                                " 2 to keep ", knob_name(Knob::Precision), " bf16"));
    case PlanRule::UlyssesHeads: check_ulysses_heads(cp, H, KV); return;
    case PlanRule::UlyssesDegreeWithoutHybrid:
      throw PlanError(rule, cat(knob_name(Knob::UlyssesDegree), " ", U, " is only for ", knob_name(Knob::CpAlgo),
                                " hybrid (this run has ", knob_name(Knob::CpAlgo), " ", cp_algo_name(cp_algo), "); add ",
                                knob_name(Knob::CpAlgo), " hybrid, or drop ", knob_name(Knob::UlyssesDegree)));
    case PlanRule::HybridWithoutDegree:
      throw PlanError(rule, cat(knob_name(Knob::CpAlgo), " hybrid needs ", knob_name(Knob::UlyssesDegree), " U, the cp ranks of ",
                                "one Ulysses all-to-all (usually the cp ranks on one node); the ring runs over ",
                                "cp / U of them"));
    case PlanRule::HybridDegree: check_hybrid_degree(cp, U, H, KV); return;
    default: return;
  }
}

PlanRule ParallelPlan::broken_rule(int64_t seq_len, int64_t micro_batch) const {
  if (cp > 1 && seq_len % (2 * cp) != 0) return PlanRule::SeqLenSplit;
  if (sequence_parallel && (micro_batch * seq_len / cp) % tp != 0) return PlanRule::SequenceParallelTokens;
  return PlanRule::None;
}

void ParallelPlan::check(int64_t seq_len, int64_t micro_batch, const std::string& name) const {
  const PlanRule rule = broken_rule(seq_len, micro_batch);
  if (rule == PlanRule::SeqLenSplit)
    throw PlanError(rule, cat(name, " ", seq_len, " is not divisible by 2 x cp = ", 2 * cp,
                              ": the zigzag split cuts every sequence into 2 x cp equal chunks; use a ",
                              "multiple, e.g. ", (seq_len / (2 * cp) + 1) * 2 * cp));
  if (rule == PlanRule::SequenceParallelTokens)
    throw PlanError(rule, cat(knob_name(Knob::TpSequenceParallel), " splits the ", micro_batch * seq_len / cp,
                              " tokens of a rank's micro-batch (", knob_name(Knob::BatchSize), " x ", name, " ", seq_len,
                              " / cp) over ", knob_name(Knob::Tp), " ", tp, " ranks: they must be divisible"));
}

}  // namespace lct
