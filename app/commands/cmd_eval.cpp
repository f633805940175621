// lctrain eval: loss and passkey retrieval of a model (or checkpoint) on a dataset.
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>

#include "app/cli/context.hpp"
#include "app/training/eval_setup.hpp"
#include "app/cli/parallel_options.hpp"
#include "app/cli/progress.hpp"
#include "common/error.hpp"
#include "io/arrays.hpp"
#include "io/dataset_file.hpp"
#include "io/model_file.hpp"
#include "parallel/cp_attention.hpp"
#include "parallel/mesh.hpp"
#include "parallel/reducer.hpp"
#include "parallel/watchdog.hpp"
#include "parallel/world.hpp"
#include "train/evaluate.hpp"

namespace lct {

namespace {

// The weights were checked on reading, so a non-finite loss means the forward pass overflowed
// float32 (weights finite but far too large, as a diverged run leaves them).
void check_finite_loss(const EvalResult& r, const std::string& model) {
  const double loss = r.mean_loss();
  if (std::isfinite(loss)) return;
  fail("eval: the mean loss over ", r.valid_targets, " targets is ", std::isnan(loss) ? "NaN" : "infinite",
       ": the model's forward pass overflowed float32 (its weights are finite, checked on reading, ",
       "but some are too large); 'lctrain inspect ", model, "' shows each tensor's norm, and if it ",
       "is a checkpoint its run's timing table shows where the loss went");
}

// The passkey table: a row label ("  depth  20- 40%", "  all") and cells "retrieved / asked  %".
constexpr int kLabelWidth = 16, kCellWidth = 21;

std::string passkey_cell(int64_t got, int64_t asked) {
  char cell[64];
  if (asked == 0) std::snprintf(cell, sizeof cell, "%*s", kCellWidth, "-");
  else
    std::snprintf(cell, sizeof cell, "%5lld / %5lld  %5.1f%%", (long long)got, (long long)asked,
                  100.0 * double(got) / double(asked));
  return cell;
}

// Passkey retrieval by depth of the key (rows) and document length (columns; with several
// lengths, a last column over all of them), each cell "retrieved / asked  percent".
void print_passkey_table(const EvalResult& r, std::ostream& out) {
  const PasskeyTable& t = r.passkey;
  const size_t L = t.lengths.size();
  const bool all_column = L > 1;
  auto row = [&](const std::string& label, const std::function<std::string(size_t)>& cell,
                 const std::string& last) {
    std::string s = label;
    s.resize(kLabelWidth, ' ');
    for (size_t l = 0; l < L; ++l) s += "  " + cell(l);
    if (all_column) s += "  " + last;
    out << s << "\n";
  };
  out << "passkey retrieval (exact key, greedy) by depth of the key"
      << (L > 1 ? " and document length" : "") << ":\n";
  const std::string split =
      r.split_docs ? cat("  (", r.split_docs, " documents longer than a sequence not scored)\n") : "";
  if (L == 0) {
    out << "  no passkey document scored\n" << split;
    return;
  }
  char head[64];
  row("", [&](size_t l) {
        std::snprintf(head, sizeof head, "%*lld tokens", kCellWidth - 7, (long long)t.lengths[l]);
        return std::string(head);
      },
      cat(std::string(kCellWidth - 11, ' '), "all lengths"));
  for (int b = 0; b < PasskeyTable::kBuckets; ++b) {
    char label[32];
    std::snprintf(label, sizeof label, "  depth %3d-%3d%%", int(std::lround(100 * PasskeyTable::depth_edge(b))),
                  int(std::lround(100 * PasskeyTable::depth_edge(b + 1))));
    row(label, [&](size_t l) { return passkey_cell(t.correct[t.at(l, b)], t.total[t.at(l, b)]); },
        passkey_cell(r.retrieved[b], r.asked[b]));
  }
  auto sum = [&](const std::vector<int64_t>& v, size_t l) {
    int64_t n = 0;
    for (int b = 0; b < PasskeyTable::kBuckets; ++b) n += v[t.at(l, b)];
    return n;
  };
  row("  all", [&](size_t l) { return passkey_cell(sum(t.correct, l), sum(t.total, l)); },
      passkey_cell(r.keys_retrieved(), r.keys_asked()));
  out << "  answer tokens right, " << answer_places_summary(r) << "\n";
  if (r.answer_tokens.size() > 1)  // keys of several symbols: those that repeat one, and the others
    out << "  keys repeating a digit  " << passkey_cell(r.repeat_retrieved, r.repeat_asked)
        << "   the others  " << passkey_cell(r.keys_retrieved() - r.repeat_retrieved, r.keys_asked() - r.repeat_asked)
        << "\n";
  out << split;
}

// The table as [lengths x depth buckets] arrays of --out (h5py reads them as they are).
void add_passkey_table_arrays(const PasskeyTable& t, std::vector<NamedArray>& arrays) {
  const int64_t L = int64_t(t.lengths.size()), B = PasskeyTable::kBuckets;
  if (L == 0) return;  // no document scored: no table
  std::vector<int32_t> lengths(t.lengths.begin(), t.lengths.end()), total(t.total.begin(), t.total.end()),
      correct(t.correct.begin(), t.correct.end());
  std::vector<double> edges, accuracy;
  for (int k = 0; k <= B; ++k) edges.push_back(PasskeyTable::depth_edge(k));
  for (size_t i = 0; i < t.total.size(); ++i)
    accuracy.push_back(t.total[i] ? double(t.correct[i]) / double(t.total[i]) : std::nan(""));
  const std::string cells = "[lengths, depth buckets]: row l is the documents of lengths[l] tokens, column b "
                            "the keys at depth [depth_edges[b], depth_edges[b+1])";
  arrays.push_back({"passkey/lengths", {L}, {}, lengths, {},
                    {{"description", std::string("document length in tokens (BOS and EOS included) of "
                                                 "each row of the table, ascending")}}});
  arrays.push_back({"passkey/depth_edges", {B + 1}, {}, {}, edges,
                    {{"description", std::string("depth bucket edges: where the key sits in the filler, "
                                                 "0 = start, 1 = end; the last bucket includes 1")}}});
  arrays.push_back({"passkey/correct", {L, B}, {}, correct, {},
                    {{"description", "keys retrieved exactly (greedy decoding) " + cells}}});
  arrays.push_back({"passkey/total", {L, B}, {}, total, {},
                    {{"description", "keys asked (documents scored) " + cells}}});
  arrays.push_back({"passkey/accuracy", {L, B}, {}, {}, accuracy,
                    {{"description", "correct / total " + cells + "; NaN where total is 0"}}});
}

// "eval over 2 ranks (zigzag split, ring: 2 hops, all shm)": how a sequence's attention
// spans its cp group (collective over it: the ring's hops).
std::string cp_description(const ParallelPlan& plan, const AttentionOp& op, CpSplit split) {
  const std::string hops = op.ring_hops();
  std::string how = plan.cp_algo == CpAlgo::Ring ? "" : plan.cp_description();
  if (!hops.empty()) how += (how.empty() ? "" : ", ") + std::string("ring: ") + hops;
  return cat("eval over ", plan.cp, " ranks (", cp_split_name(split), " split, ", how, ")");
}

struct Evaluated {
  EvalResult result;
  double seconds = 0;
};

// Every dp replica evaluates its share of the batches (EvalShare), each sequence split over
// its cp group; every rank merges every replica's part into the whole result.
Evaluated evaluate_on_mesh(Context& ctx, const ParallelPlan& plan, const Mesh& mesh, const ModelData& m,
                           TokenSource& data, const ModelShape& shape) {
  const EvalOptions& o = ctx.inv.eval;
  const MPI_Comm cp_comm = mesh.comm("cp");
  const std::unique_ptr<AttentionOp> attention = make_cp_attention(plan, cp_comm, m.config, shape);
  MpiStepReducer sums(cp_comm);  // the loss sums over the cp ranks, as in training
  EvalCp cp;
  if (plan.cp > 1) {
    cp = mpi_eval_cp(cp_comm, plan.split_for(m.config.sliding_window, o.seq_len), plan.shard_group(), sums);
    ctx.out() << cp_description(plan, *attention, cp.split) << "\n";
  }
  LlamaModel model(m.config, shape, attention.get());
  std::copy(m.params.data(), m.params.data() + m.layout.total, model.params());
  PhaseClock clock;
  Progress progress(ctx.out(), "eval", o.progress_every);
  const EvalShare share{plan.dp, mesh.index("dp")};
  Evaluated e;
  e.result = evaluate(model, data, o.seq_len, o.batch_size, o.max_sequences, clock,
                      [&](int64_t done, int64_t total) { progress.update(double(done), double(total), "sequences"); },
                      cp, share);
  if (plan.dp > 1) e.result = merge_replicas(e.result, mesh.comm("dp"));
  e.seconds = progress.seconds();
  return e;
}

// The summary line, the loss by position and the passkey table; the figures --out keeps.
struct EvalReport {
  std::vector<int64_t> pos_start, pos_targets;
  std::vector<double> pos_loss;
  int64_t asked = 0, got = 0;
  std::vector<double> rate;
  std::vector<int32_t> asked_v, got_v;
  std::string text;  // all of it as printed, kept in --out for `inspect`
};

EvalReport report_eval(std::ostream& out, const EvalResult& r, const DatasetInfo& ds, int64_t seq_len, double secs) {
  EvalReport rep;
  char line[200];
  std::snprintf(line, sizeof line,
                "eval: %lld sequences of %lld tokens, mean loss %.4f nats over %lld targets, next token "
                "right %.2f%% (%.1f s)\n",
                (long long)r.sequences, (long long)seq_len, r.mean_loss(), (long long)r.valid_targets,
                r.valid_targets ? 100.0 * double(r.correct) / double(r.valid_targets) : 0.0, secs);
  out << line;
  // Loss by position in the document: a model that uses its context predicts later tokens better.
  out << "loss by position in the document:\n";
  for (size_t k = 0; k < r.position_loss.size(); ++k) {
    if (r.position_targets[k] == 0) continue;
    rep.pos_start.push_back(EvalResult::bucket_start(int(k)));
    rep.pos_targets.push_back(r.position_targets[k]);
    rep.pos_loss.push_back(r.position_loss[k] / double(r.position_targets[k]));
    std::snprintf(line, sizeof line, "  %7lld-%-7lld  %.4f nats over %lld targets\n", (long long)rep.pos_start.back(),
                  (long long)EvalResult::bucket_start(int(k) + 1) - 1, rep.pos_loss.back(),
                  (long long)rep.pos_targets.back());
    out << line;
  }
  if (!ds.passkey.empty()) {
    for (int b = 0; b < EvalResult::kBuckets; ++b) {
      rep.asked += r.asked[b];
      rep.got += r.retrieved[b];
      rep.rate.push_back(r.asked[b] ? double(r.retrieved[b]) / double(r.asked[b]) : 0.0);
      rep.asked_v.push_back(int32_t(r.asked[b]));
      rep.got_v.push_back(int32_t(r.retrieved[b]));
    }
    print_passkey_table(r, out);
  }
  out << std::flush;
  return rep;
}

// --out: the figures as arrays and attributes h5py reads (rank 0 writes).
void write_eval_file(const Context& ctx, const ParallelPlan& plan, const EvalResult& r, const EvalReport& rep) {
  const EvalOptions& o = ctx.inv.eval;
  const Provenance prov = ctx.provenance();
  std::vector<NamedArray> arrays;
  if (!rep.pos_loss.empty()) {
    const int64_t n = int64_t(rep.pos_loss.size());
    std::vector<int32_t> start(rep.pos_start.begin(), rep.pos_start.end()),
        targets(rep.pos_targets.begin(), rep.pos_targets.end());
    arrays.push_back({"position/start", {n}, {}, start, {}});
    arrays.push_back({"position/targets", {n}, {}, targets, {}});
    arrays.push_back({"position/loss", {n}, {}, {}, rep.pos_loss});
  }
  if (!rep.rate.empty()) {
    arrays.push_back({"passkey/asked", {int64_t(rep.asked_v.size())}, {}, rep.asked_v, {}});
    arrays.push_back({"passkey/retrieved", {int64_t(rep.got_v.size())}, {}, rep.got_v, {}});
    arrays.push_back({"passkey/rate", {int64_t(rep.rate.size())}, {}, {}, rep.rate});
    add_passkey_table_arrays(r.passkey, arrays);
    const int64_t places = int64_t(r.answer_tokens.size());
    arrays.push_back({"passkey/answer_tokens", {places}, {}, std::vector<int32_t>(r.answer_tokens.begin(), r.answer_tokens.end()), {},
                      {{"description", "answer tokens scored, by place in the key (0 = first digit)"}}});
    arrays.push_back({"passkey/answer_right", {places}, {}, std::vector<int32_t>(r.answer_right.begin(), r.answer_right.end()), {},
                      {{"description", "of those, how many had the right greedy prediction"}}});
  }
  write_array_file(o.out, arrays,
                   {{"lctrain_file", std::string("eval")}, {"format_version", int64_t(1)},
                    {"mean_loss", r.mean_loss()}, {"valid_targets", r.valid_targets},
                    {"next_token_correct", r.correct}, {"cp", plan.cp}, {"dp", plan.dp},
                    {"sequences", r.sequences}, {"seq_len", o.seq_len},
                    {"passkey_retrieved", rep.got}, {"passkey_asked", rep.asked},
                    {"passkey_repeat_retrieved", r.repeat_retrieved}, {"passkey_repeat_asked", r.repeat_asked},
                    {"model", o.model},
                    {"data", o.data}, {"report", rep.text}},
                   o.force, &prov);
  ctx.out() << "wrote " << o.out << std::endl;
}

}  // namespace

int cmd_eval(Context& ctx) {
  const EvalOptions& o = ctx.inv.eval;
  const World& world = ctx.world;
  const ParallelPlan plan = eval_plan(o, world.size);
  // A stopped or lost rank must not leave the others waiting forever in the ring or the sums.
  watchdog_set_context("eval");
  const WatchdogRun watchdog(o.comm_timeout, 0, world.rank);
  ctx.print_startup("eval", true);
  if (o.seq_len < 2 || o.batch_size < 1) fail("--seq-len must be at least 2 and --batch-size at least 1");
  plan.check(o.seq_len, o.batch_size, "--seq-len");
  const ModelData m = read_model_file(o.model);
  const std::unique_ptr<TokenSource> data = open_dataset_file(o.data);  // read a batch at a time
  const DatasetInfo& ds = data->info();
  check_fits_model(ds, o.data, m.config.vocab_size, o.model);
  check_same_tokenizer(m.tokenizer, o.model, tokenizer_info(ds), o.data);
  if (const std::string w = seq_len_warning(m.config, o.seq_len); !w.empty()) ctx.out() << w << "\n";
  const Precision precision = o.precision;
  plan.check(m.config, precision);
  if (const std::string w = ctx.bf16_warning(precision); !w.empty()) ctx.out() << w << "\n";
  Mesh mesh(world, {{"dp", int(plan.dp)}, {"cp", int(plan.cp)}});
  // Forward only: keeping only layer inputs is enough and smallest.
  const ModelShape shape{o.batch_size * o.seq_len / plan.cp, o.seq_len, Checkpointing::Full,
                         {o.block_q, o.block_k}, ctx.attention_isa(precision), precision};
  const Evaluated e = evaluate_on_mesh(ctx, plan, mesh, m, *data, shape);
  check_finite_loss(e.result, o.model);
  std::ostringstream printed;
  EvalReport rep = report_eval(printed, e.result, ds, o.seq_len, e.seconds);
  rep.text = printed.str();
  ctx.out() << rep.text << std::flush;
  if (!o.out.empty() && world.root()) write_eval_file(ctx, plan, e.result, rep);
  return kExitOk;
}

}  // namespace lct
