#include "app/training/train_record.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <map>
#include <ostream>

#include "app/training/eval_setup.hpp"
#include "app/cli/progress.hpp"
#include "common/error.hpp"
#include "common/stats.hpp"
#include "sys/memory.hpp"

namespace lct {

namespace {

struct ColumnSpec {
  const char* name;
  const char* unit;
  const char* help;
};

// One value per step (the step's, or the mean over ranks).
const ColumnSpec kColumns[] = {
    {"step", "", "optimizer step, 1-based"},
    {"restart", "", "times the run had been resumed when this step ran"},
    {"seq_len", "tokens", "sequence length of the step (its --seq-len-schedule stage)"},
    {"loss", "nats", "mean cross-entropy over the step's valid targets (all ranks)"},
    {"lr", "", "learning rate of the update"},
    {"grad_norm", "", "global gradient L2 norm before clipping"},
    {"skipped", "", "1 when the update was skipped (loss or gradient not finite)"},
    {"tokens", "tokens", "real (non-padding) tokens of the step, all ranks"},
    {"valid_targets", "tokens", "scored targets of the step, all ranks"},
    {"seconds", "s", "wall time of the step (rank 0)"},
    {"tokens_per_s", "tokens/s", "tokens / (seconds - io_s): the step without its checkpoint write"},
    {"gflops", "GFLOP/s", "model FLOPs per rank (recomputation excluded) / (seconds - io_s)"},
    {"mfu", "", "gflops / peak_gflops: the measured multiply-add peak of the rank's cores"},
    {"attn_fwd_s", "s", "flash attention forward, recomputations included (rank 0)"},
    {"attn_bwd_s", "s", "flash attention backward (rank 0)"},
    {"gemm_s", "s", "linear layers and LM head (rank 0)"},
    {"other_s", "s", "norms, RoPE, SwiGLU, embedding, data (rank 0)"},
    {"optimizer_s", "s", "gradient norm, clipping, AdamW (rank 0)"},
    {"io_s", "s", "checkpoint written at this step"},
    {"comm_s", "s", "time blocked on context-parallel transfers: exposed communication (rank 0)"},
    {"allreduce_s", "s", "gradient, loss and count allreduce (rank 0)"},
    {"exposed_comm_frac", "", "mean over ranks of comm_s / seconds"},
    {"imbalance", "", "max / mean over ranks of the busy time (seconds - comm - allreduce)"},
    {"predicted_imbalance", "", "max / mean over ranks of rank_work_flop: the imbalance the step's documents predict"},
    {"unbalanced_imbalance", "", "predicted_imbalance of the same tokens under --balance none (each dp rank its own sequences); NaN in a run that does not place by work"},
    {"peak_rss_mib", "MiB", "process high-water resident memory (rank 0)"},
    {"eval_loss", "nats", "--eval-every: mean loss on --eval-data's first sequences (NaN: no evaluation)"},
    {"eval_accuracy", "", "--eval-every: share of its targets whose argmax is the target (greedy next token)"},
    {"eval_retrieval", "", "--eval-every: share of its passkeys retrieved exactly (NaN: no passkeys)"},
    {"peer_wait_frac", "", "of exposed_comm_frac, the part spent waiting for a slower rank (shared-memory ring hops)"},
    {"offload_s", "s", "waiting for --offload-activations' tier: the part of its saves and loads that compute did not hide (rank 0)"},
    {"steal_frac", "", "mean over ranks of rank_steal_s / rank_seconds: the share of the step a hypervisor ran other work on the ranks' CPUs (0 on bare metal, NaN where not reported)"},
};
// One value per rank per step: [steps, ranks] datasets (RankFigures kSeconds..kSteal).
const ColumnSpec kRankColumns[] = {
    {"rank_seconds", "s", "step time per rank before the gradient allreduce"},
    {"rank_attn_s", "s", "attention compute per rank (forward + backward)"},
    {"rank_comm_s", "s", "exposed context-parallel communication per rank"},
    {"rank_allreduce_s", "s", "allreduce time per rank"},
    {"rank_bytes_sent", "bytes", "bytes sent per rank (ring transfers + allreduce volume)"},
    {"rank_peer_wait_s", "s", "of rank_comm_s, the time before the neighbours had started the hop (shared-memory ring hops; the rest is transfer)"},
    {"rank_work_flop", "FLOP", "model FLOPs of the rank's share of the step (its tokens, and its documents' visible pairs under the mask), recomputation excluded"},
    {"rank_steal_s", "s", "seconds a hypervisor ran other work on the rank's CPUs during the step (the guest's steal time, mean over its CPUs; over rank_seconds, the share of the step taken from the rank; 0 on bare metal, NaN where the kernel does not report it)"},
};

}  // namespace

bool RankFigures::any_stop() const {
  for (int r = 0; r < ranks; ++r)
    if (rank(r)[kStopFlag] != 0) return true;
  return false;
}

double RankFigures::mean_share(Slot s) const {
  double f = 0;
  for (int r = 0; r < ranks; ++r) f += rank(r)[s] / rank(r)[kSeconds] / ranks;
  return f;
}

double RankFigures::predicted_imbalance() const {
  double most = 0, sum = 0;
  for (int r = 0; r < ranks; ++r) {
    most = std::max(most, rank(r)[kWork]);
    sum += rank(r)[kWork];
  }
  return sum > 0 ? most / (sum / ranks) : 1.0;
}

double RankFigures::mean_work() const {
  double sum = 0;
  for (int r = 0; r < ranks; ++r) sum += rank(r)[kWork];
  return sum / ranks;
}

double RankFigures::imbalance() const {
  double busy_max = 0, busy_sum = 0;
  for (int r = 0; r < ranks; ++r) {
    const double busy = rank(r)[kSeconds] - rank(r)[kComm] - rank(r)[kAllreduce];
    busy_max = std::max(busy_max, busy);
    busy_sum += busy;
  }
  return busy_max / (busy_sum / ranks);
}

TrainRecord::TrainRecord(int ranks, bool peer_wait_known)
    : ranks_(ranks), peer_wait_known_(peer_wait_known), width_(ranks) {
  for (const ColumnSpec& c : kColumns) table_.columns.push_back({c.name, c.unit, c.help, {}, 1});
  for (const ColumnSpec& c : kRankColumns)
    table_.columns.push_back({c.name, c.unit, c.help, {}, int64_t(ranks), true});
}

bool TrainRecord::continue_from(TimingTable previous, int64_t seq_len) {
  // Columns later lctrains added, and what an older table's rows hold in them: seq_len (from
  // before sequence-length schedules) the run's one length, which a resume keeps; the eval
  // columns (from before --eval-every) NaN, no evaluation; the peer-wait columns (from before
  // exposed communication was split), the predicted work and the steal time (from before
  // they were recorded) NaN. In table order, so that each goes where this run's table has
  // it; a per-rank one as wide as the table's other per-rank columns.
  const std::pair<const char*, double> added[] = {{"seq_len", double(seq_len)},
                                                  {"eval_loss", std::nan("")},
                                                  {"eval_accuracy", std::nan("")},
                                                  {"eval_retrieval", std::nan("")},
                                                  {"predicted_imbalance", std::nan("")},
                                                  {"unbalanced_imbalance", std::nan("")},
                                                  {"peer_wait_frac", std::nan("")},
                                                  {"steal_frac", std::nan("")},
                                                  {"rank_peer_wait_s", std::nan("")},
                                                  {"rank_work_flop", std::nan("")},
                                                  {"rank_steal_s", std::nan("")}};
  const size_t first_rank_column = std::size(kColumns);
  for (const auto& [name, fill] : added) {
    if (previous.find(name)) continue;
    const size_t at = size_t(&table_.column(name) - table_.columns.data());
    // (a per-rank column takes its width from the first per-rank column, which must be there)
    if (at > previous.columns.size() || at == first_rank_column) return false;
    TimingColumn c = table_.columns[at];
    const TimingColumn& like = previous.columns[at < first_rank_column ? 0 : first_rank_column];
    c.width = like.width;
    c.values.assign(like.values.size(), fill);
    previous.columns.insert(previous.columns.begin() + long(at), std::move(c));
  }
  if (previous.columns.size() != table_.columns.size()) return false;
  for (size_t c = 0; c < table_.columns.size(); ++c)
    if (previous.columns[c].name != table_.columns[c].name ||
        (c < first_rank_column ? previous.columns[c].width != 1
                               : previous.columns[c].width != previous.columns[first_rank_column].width))
      return false;
  // A resume on another rank count (the degrees changed) keeps one table: per-rank columns
  // are as wide as the larger count, and the ranks a row did not have are NaN.
  const int64_t had = previous.columns[first_rank_column].width;
  width_ = std::max<int64_t>(had, ranks_);
  // Only the values are taken: the columns keep this run's layout, so a one-rank table of
  // an older lctrain (per-rank columns [rows], not [rows, 1]) continues in today's layout.
  for (size_t c = 0; c < table_.columns.size(); ++c) {
    std::vector<double>& v = previous.columns[c].values;
    if (c >= first_rank_column && had != width_) {
      std::vector<double> wide;
      for (size_t row = 0; row < v.size() / size_t(had); ++row)
        for (int64_t r = 0; r < width_; ++r)
          wide.push_back(r < had ? v[row * size_t(had) + size_t(r)] : std::nan(""));
      v = std::move(wide);
    }
    table_.columns[c].values = std::move(v);
    if (c >= first_rank_column) table_.columns[c].width = width_;
  }
  return true;
}

void TrainRecord::add(const StepFigures& f) {
  const StepStats& st = f.stats;
  const auto& ph = f.clock->seconds;
  const auto phase = [&](Phase p) { return ph[size_t(p)]; };
  const double row[] = {double(st.step), double(f.restarts), double(f.seq_len), st.loss, st.lr, st.grad_norm,
                        double(st.skipped), double(st.real_tokens), double(st.valid_targets),
                        f.seconds, double(st.real_tokens) / f.train_seconds(), f.gflops,
                        f.gflops / f.peak_gflops, phase(Phase::AttnFwd), phase(Phase::AttnBwd),
                        phase(Phase::Gemm), phase(Phase::Other), phase(Phase::Optimizer),
                        phase(Phase::IO), phase(Phase::Comm), phase(Phase::Allreduce),
                        f.ranks->exposed_comm_frac(), f.ranks->imbalance(), f.ranks->predicted_imbalance(), f.unbalanced_imbalance, peak_rss_mib(),
                        f.eval_loss, f.eval_accuracy, f.eval_retrieval, f.ranks->peer_wait_frac(),
                        phase(Phase::Offload), f.ranks->steal_frac()};
  static_assert(std::size(row) == std::size(kColumns));
  static_assert(std::size(kRankColumns) == RankFigures::kStopFlag);  // kSeconds .. kSteal
  for (size_t c = 0; c < std::size(kColumns); ++c) table_.columns[c].values.push_back(row[c]);
  for (size_t c = 0; c < std::size(kRankColumns); ++c)
    for (int64_t r = 0; r < width_; ++r)
      table_.columns[std::size(kColumns) + c].values.push_back(r < ranks_ ? f.ranks->rank(int(r))[c]
                                                                           : std::nan(""));
}

void TrainRecord::rebase_mfu(double peak_gflops) {
  std::vector<double>& mfu = table_.column("mfu").values;
  const std::vector<double>& gflops = table_.column("gflops").values;
  const std::vector<double>& restart = table_.column("restart").values;
  for (size_t i = 0; i < mfu.size(); ++i)
    if (restart[i] == restart.back()) mfu[i] = gflops[i] / peak_gflops;
}

std::string TrainRecord::step_line(const StepFigures& f, double eta) const {
  const StepStats& st = f.stats;
  char line[480], par[160] = "", seq[32] = "", unbalanced[32] = "";
  if (f.show_seq_len) std::snprintf(seq, sizeof seq, "  seq %lld", (long long)f.seq_len);
  if (!std::isnan(f.unbalanced_imbalance)) std::snprintf(unbalanced, sizeof unbalanced, ", unbalanced %.2f", f.unbalanced_imbalance);
  if (ranks_ > 1 && peer_wait_known_)
    std::snprintf(par, sizeof par, "  comm %.1f%% (peer %.1f%%)  imb %.2f (docs %.2f%s)", 100 * f.ranks->exposed_comm_frac(),
                  100 * f.ranks->peer_wait_frac(), f.ranks->imbalance(), f.ranks->predicted_imbalance(), unbalanced);
  else if (ranks_ > 1)
    std::snprintf(par, sizeof par, "  comm %.1f%%  imb %.2f (docs %.2f%s)", 100 * f.ranks->exposed_comm_frac(),
                  f.ranks->imbalance(), f.ranks->predicted_imbalance(), unbalanced);
  std::snprintf(line, sizeof line,
                "step %6lld/%lld%s  loss %.4f  lr %.2e  |g| %.3f  %.2f s  %.0f tok/s  %.1f GFLOP/s  "
                "MFU %.1f%%%s  eta %s%s",
                (long long)st.step, (long long)f.steps, seq, st.loss, st.lr, st.grad_norm, f.train_seconds(),
                double(st.real_tokens) / f.train_seconds(), f.gflops, 100 * f.gflops / f.peak_gflops, par,
                duration(eta).c_str(), st.skipped ? "  SKIPPED (non-finite)" : "");
  return timestamp() + line;
}

namespace {

// The run's verification: the mean loss of its first k and last k steps (k = a quarter of
// them, 1 to 5), and how far the two may differ by noise alone: two standard errors of their
// difference, from the spread of the step-to-step changes around their mean (a trend moves the
// changes' mean, not their spread; each change carries two steps' noise).
struct LossVerdict {
  double first = 0, last = 0, margin = 0;
  size_t k = 1;
  bool one_step = false, falling = false, within_noise = false;
  const char* verdict = "SKIPPED";
};

LossVerdict verify_loss(const std::vector<double>& loss) {
  LossVerdict v;
  v.k = std::max<size_t>(1, std::min<size_t>(5, loss.size() / 4));
  for (size_t i = 0; i < v.k; ++i) {
    v.first += loss[i] / double(v.k);
    v.last += loss[loss.size() - 1 - i] / double(v.k);
  }
  // One step cannot show a trend: say so rather than fail a smoke test.
  v.one_step = loss.size() < 2;
  std::vector<double> changes;
  for (size_t i = 1; i < loss.size(); ++i) changes.push_back(loss[i] - loss[i - 1]);
  double mean_change = 0, spread = 0;
  for (double c : changes) mean_change += c / double(changes.size());
  for (double c : changes) spread += (c - mean_change) * (c - mean_change) / double(std::max<size_t>(1, changes.size() - 1));
  v.margin = 2 * std::sqrt(spread / 2) * std::sqrt(2.0 / double(v.k));
  v.falling = std::isfinite(v.last) && v.last < v.first - v.margin;
  v.within_noise = std::isfinite(v.last) && !v.falling && v.last <= v.first + v.margin;
  v.verdict = v.one_step ? "SKIPPED" : v.falling ? "PASSED" : v.within_noise ? "INCONCLUSIVE" : "FAILED";
  return v;
}

// The rows that make up the whole run in step order (after a resume that repeated steps, the
// last row of each step), and which of them were the first step of a start or restart.
struct RunRows {
  std::vector<size_t> rows;
  std::vector<bool> startup;
};
RunRows whole_run_rows(TimingTable& t) {
  const std::vector<double>& step = t.column("step").values;
  const std::vector<double>& restart = t.column("restart").values;
  std::map<double, size_t> last;  // step -> its last row
  for (size_t r = 0; r < step.size(); ++r) last[step[r]] = r;
  RunRows out;
  for (const auto& [s, r] : last) {
    out.rows.push_back(r);
    out.startup.push_back(r == 0 || restart[r] != restart[r - 1]);
  }
  return out;
}

}  // namespace

void TrainRecord::finish(std::ostream& out, int64_t dp, int64_t cp, double peak,
                         const std::string& peak_how) {
  // The whole run, across its restarts: the table holds the earlier runs' rows too.
  const RunRows run = whole_run_rows(table_);
  const auto all = [&](const char* name) {
    const std::vector<double>& v = table_.column(name).values;
    std::vector<double> x;
    for (size_t r : run.rows) x.push_back(v[r]);
    return x;
  };
  const std::vector<double> loss = all("loss");
  if (loss.empty()) return;
  const LossVerdict v = verify_loss(loss);
  const double first = v.first, last = v.last, margin = v.margin;
  const size_t k = v.k;
  const bool one_step = v.one_step, falling = v.falling, within_noise = v.within_noise;
  const char* verdict = v.verdict;
  // Medians leave out each start's first step (start-up) unless there is nothing else.
  const bool only_startup = std::all_of(run.startup.begin(), run.startup.end(), [](bool b) { return b; });
  const auto kept = [&](const std::vector<double>& x) {
    std::vector<double> k;
    for (size_t i = 0; i < x.size(); ++i)
      if (only_startup || !run.startup[i]) k.push_back(x[i]);
    return k;
  };
  const auto tail = [&](const char* name) { return median(kept(all(name))); };
  // Over the steps that have the figure (NaN where none has).
  const auto tail_known = [&](const char* name) {
    std::vector<double> v = kept(all(name));
    v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
    return v.empty() ? std::nan("") : median(v);
  };
  const bool skip = !only_startup;
  const bool restarted = std::count(run.startup.begin(), run.startup.end(), true) > 1;
  const double fom = tail("tokens_per_s");
  std::vector<double> transfer = all("exposed_comm_frac");  // per step: comm that was not a peer's lateness
  const std::vector<double> peer = all("peer_wait_frac");
  for (size_t i = 0; i < transfer.size(); ++i) transfer[i] -= peer[i];
  const double transfer_frac = median(kept(transfer));
  table_.summary = {{"figure_of_merit_tokens_per_s", fom},
                    {"median_mfu", tail("mfu")},
                    {"median_exposed_comm_frac", tail("exposed_comm_frac")},
                    {"median_peer_wait_frac", tail("peer_wait_frac")},
                    {"median_imbalance", tail("imbalance")},
                    {"median_predicted_imbalance", tail("predicted_imbalance")},
                    {"median_unbalanced_imbalance", tail_known("unbalanced_imbalance")},
                    {"median_steal_frac", tail_known("steal_frac")},
                    {"peak_gflops", peak},
                    {"peak_how", peak_how},
                    {"dp", dp},
                    {"cp", cp},
                    {"verification", std::string(verdict)},
                    {"loss_first", first},
                    {"loss_last", last}};
  out << std::setprecision(4);
  if (one_step)
    out << "verification: loss " << first << " after the run's one step: SKIPPED (a falling loss "
        << "needs two steps or more)\n";
  else
    out << "verification: loss " << first << " (first " << k << " steps of the run" << (restarted ? ", across its restarts" : "")
        << ") -> " << last << " (last " << k << "): "
        << (falling          ? "falling, "
            : within_noise   ? cat("within the steps' noise (+-", margin, "), ")
                             : "not falling, ")
        << verdict << (within_noise ? " (more steps, or more sequences per step, tell)" : "") << "\n";
  out << std::fixed << std::setprecision(1) << "figure of merit: " << fom
      << " tokens/s (median over steps" << (skip ? (restarted ? " after each start's first" : " after the first") : "")
      << "), MFU "
      << 100 * tail("mfu") << "%";
  if (ranks_ > 1) {
    out << ", exposed communication " << 100 * tail("exposed_comm_frac") << "%";
    if (peer_wait_known_)
      out << " (waiting for a slower rank " << 100 * tail("peer_wait_frac") << "%, transfers "
          << 100 * transfer_frac << "%)";
    out << ", imbalance " << std::setprecision(2) << tail("imbalance") << " (the documents predict "
        << tail("predicted_imbalance");
    if (const double u = tail_known("unbalanced_imbalance"); !std::isnan(u)) out << "; unbalanced " << u;
    out << ")";
  }
  out << "\n";
  // A virtual machine whose vCPUs share host cores: threads wait for vCPUs that do not run.
  if (const double steal = tail_known("steal_frac"); steal >= 0.01)
    out << std::setprecision(1) << "note: a hypervisor ran other work on the ranks' CPUs for " << 100 * steal
        << "% of the steps' time (steal time, median over steps): this virtual machine's CPUs share host "
           "cores, and a step waits for threads whose CPU is not running; rank_steal_s in the timing "
           "table has it per step and rank\n";
  if (tail("mfu") > 1.0)  // no step can beat the hardware: the peak itself is too low
    out << (peak_how == "--peak-gflops"
                ? "note: MFU above 100%: the --peak-gflops given is below what the steps reached\n"
                : "note: MFU above 100% means both peak probes, at start-up and at the end, ran "
                  "slower than the steps did (other work on these cores while they ran?); pass "
                  "--peak-gflops with this machine's peak to compare runs\n");
}

std::string eval_line(int64_t step, const EvalResult& r) {
  char line[160];
  const std::string keys = passkey_summary(r);
  std::snprintf(line, sizeof line, "eval at step %lld: loss %.4f, next token %.1f%%%s%s", (long long)step,
                r.mean_loss(), 100 * eval_accuracy(r), keys.empty() ? "" : ", ", keys.c_str());
  return timestamp() + line;
}

double eval_accuracy(const EvalResult& r) {
  return r.valid_targets ? double(r.correct) / double(r.valid_targets) : std::nan("");
}

double eval_retrieval(const EvalResult& r) {
  const int64_t asked = r.keys_asked();
  return asked ? double(r.keys_retrieved()) / double(asked) : std::nan("");
}

std::string checkpoint_line(const std::string& path, double seconds) {
  std::error_code ec;
  const double mib = double(std::filesystem::file_size(path, ec)) / double(1 << 20);
  char line[96];
  std::snprintf(line, sizeof line, ": %.1f MiB in %.2f s (%.0f MiB/s)", ec ? 0.0 : mib, seconds,
                ec ? 0.0 : mib / std::max(seconds, 1e-9));
  return timestamp() + "checkpoint " + path + line;
}

}  // namespace lct
