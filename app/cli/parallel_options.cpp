#include "app/cli/parallel_options.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace lct {

namespace {

// Every value of an enum in the order the options list them, named by `name`.
template <class E, size_t N>
std::vector<std::string> names_of(const E (&values)[N], const char* (*name)(E)) {
  std::vector<std::string> out;
  for (E v : values) out.push_back(name(v));
  return out;
}

template <class E, size_t N>
E parse(const std::string& text, const char* option, const E (&values)[N], const char* (*name)(E)) {
  for (E v : values)
    if (text == name(v)) return v;
  std::string list;
  for (const std::string& n : names_of(values, name)) list += (list.empty() ? "" : ", ") + n;
  fail(option, " ", text, ": use one of ", list);
}

constexpr CpTransport kTransports[] = {CpTransport::Auto, CpTransport::Shm, CpTransport::Mpi};
constexpr CpSplitChoice kSplits[] = {CpSplitChoice::Auto, CpSplitChoice::Zigzag, CpSplitChoice::Contiguous};

}  // namespace

std::vector<std::string> cp_algo_names() { return names_of(kCpAlgos, cp_algo_name); }
std::vector<std::string> cp_transport_names() { return names_of(kTransports, cp_transport_name); }
std::vector<std::string> cp_split_names() { return names_of(kSplits, cp_split_choice_name); }
CpAlgo parse_cp_algo(const std::string& name) { return parse(name, "--cp-algo", kCpAlgos, cp_algo_name); }

namespace {

void read_cp_attention(const CpOptions& o, ParallelPlan& p) {
  p.cp_algo = parse_cp_algo(o.algo);
  p.cp_split = parse(o.split, "--cp-split", kSplits, cp_split_choice_name);
  p.cp_transport = parse(o.transport, "--cp-transport", kTransports, cp_transport_name);
  p.ulysses_degree = o.ulysses_degree;
}

}  // namespace

ParallelPlan parallel_plan(const TrainOptions& o, int world) {
  if (o.cp < 1) fail("--cp ", o.cp, " must be at least 1");
  if (o.tp < 1) fail("--tp ", o.tp, " must be at least 1");
  if (o.dp < 0) fail("--dp ", o.dp, " must be at least 1 (or 0 for world size / (cp x tp))");
  ParallelPlan p;
  p.dp = o.dp > 0 ? o.dp : std::max<int64_t>(1, world / (o.cp * o.tp));
  p.cp = o.cp;
  p.tp = o.tp;
  p.sequence_parallel = o.tp_sequence_parallel;
  p.zero = o.zero;
  p.grad_reduce = o.grad_reduce;
  p.balance = o.balance;
  read_cp_attention(o.cp_attention, p);
  return p;
}

ParallelPlan eval_plan(const EvalOptions& o, int world) {
  ParallelPlan p;
  p.cp = o.cp;
  p.dp = o.dp > 0 ? o.dp : std::max<int64_t>(1, world / o.cp);
  read_cp_attention(o.cp_attention, p);
  if (p.dp * p.cp == world) return p;
  if (p.dp == 1)
    fail("eval splits every sequence over --cp ", o.cp, " ranks but runs on ", world, "; start it with mpirun -n ",
         o.cp, " or pass --cp ", world, " (or --dp ", world, " to share the sequences instead)");
  fail("eval runs --dp ", p.dp, " x --cp ", p.cp, " = ", p.dp * p.cp, " ranks but was started on ", world,
       "; start it with mpirun -n ", p.dp * p.cp, ", or pass --dp 0 (the world size / cp)");
}

}  // namespace lct
