#include "app/training/train_loop.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <ostream>

#include "app/cli/progress.hpp"
#include "app/training/eval_setup.hpp"
#include "app/training/train_checkpoint.hpp"
#include "app/training/train_setup.hpp"
#include "app/training/step_start_save.hpp"
#include "common/error.hpp"
#include "common/fault.hpp"
#include "io/timing_file.hpp"
#include "model/flops.hpp"
#include "model/shard.hpp"
#include "parallel/watchdog.hpp"
#include "sys/steal.hpp"
#include "sys/stop.hpp"

namespace lct {

namespace {
// Open MPI's mpirun passes SIGTERM and SIGINT on to the ranks and SIGKILLs them
// odls_base_sigkill_timeout seconds later (1 by default). Inside a step the ranks write the
// state the step started from at once (step_start_save.hpp; without MPI_THREAD_MULTIPLE they
// finish the step first): when that takes longer than the grace, a SIGTERM to mpirun ends the
// run at its previous checkpoint. Said once, early, so that the user can choose.
std::string sigterm_grace_note(double step_s, double checkpoint_s, bool writes_step_start) {
  if (!std::getenv("OMPI_COMM_WORLD_SIZE")) return "";  // not launched by Open MPI
  const char* v = std::getenv("OMPI_MCA_odls_base_sigkill_timeout");
  const double grace = v && *v ? std::atof(v) : 1.0;
  const double stop_s = writes_step_start ? checkpoint_s : step_s + checkpoint_s;
  if (stop_s <= grace) return "";
  return cat(std::fixed, std::setprecision(1), "note: ",
             writes_step_start ? "" : cat("a step takes ", step_s, " s and "), "a checkpoint about ",
             checkpoint_s, " s, longer than the ", grace, " s Open MPI's mpirun waits between passing ",
             "SIGTERM or SIGINT on and killing the ranks (odls_base_sigkill_timeout): a SIGTERM to mpirun ",
             "would end this run at its previous checkpoint. Stop it with SIGUSR1 instead (checkpoint, exit 85), ",
             "or start it with mpirun --mca odls_base_sigkill_timeout N (seconds)");
}
}  // namespace

// This rank's share of step `step`'s --grad-accum micro-batches at the step's sequence
// length: its dp slice cut by the cp split or, placed by work (--balance cost), its part of
// every dp rank's sequences (model/balance.hpp). A contiguous split (a sliding window that
// fits a rank's share) is kept: its ring needs one hop, and the window already evens the
// work per token out.
std::vector<Batch> TrainLoop::micro_batches(int64_t step, StepWork& work) {
  const ParallelPlan& plan = layout.plan;
  const int64_t dp = plan.dp, cp = plan.cp, B = o.batch_size, S = schedule.seq_len_at(step);
  const CpSplit split = plan.split_for(mc.sliding_window, S);
  DataLoader& loader = data.at(step);
  std::vector<Batch> micro;
  for (int64_t a = 0; a < o.grad_accum; ++a) {
    std::vector<const PackedSequence*> seqs = loader.take(B * dp);
    if (plan.balances() && split == CpSplit::Zigzag) {
      micro.push_back(balanced_share(make_batch(dataset, seqs, S), split, work));
      continue;
    }
    seqs = {seqs.begin() + where.dp_rank * B, seqs.begin() + (where.dp_rank + 1) * B};
    Batch full = make_batch(dataset, seqs, S);
    if (cp == 1) {
      work.pairs += visible_pairs(full, mc.sliding_window);
      micro.push_back(std::move(full));
      continue;
    }
    // The split evens out causal work within one document, not across packed ones: the
    // rank's own pairs.
    const std::vector<int64_t> rows = shard_indices(B, S, cp, where.cp_rank, split, plan.shard_group());
    work.pairs += pairs_of(full, rows, mc.sliding_window);
    micro.push_back(take_rows(full, rows, B, S / cp));
  }
  return micro;
}

// This rank's part of a micro-batch of every dp rank's sequences, placed by work over the
// dp x cp ranks (replica r = dp rank x cp + cp rank, the order of the replicas' communicator).
// The baseline each rank starts from is --balance none's: dp rank d's sequences cut by the
// split.
Batch TrainLoop::balanced_share(const Batch& full, CpSplit split, StepWork& work) const {
  const ParallelPlan& plan = layout.plan;
  const int64_t B = full.B / plan.dp, S = full.S, cp = plan.cp;
  std::vector<std::vector<int64_t>> baseline;
  for (int64_t d = 0; d < plan.dp; ++d)
    for (int64_t c = 0; c < cp; ++c) {
      std::vector<int64_t> rows = shard_indices(B, S, cp, c, split);
      for (int64_t& i : rows) i += d * B * S;
      baseline.push_back(std::move(rows));
    }
  const Placement p = balance_placement(full, baseline, mc.sliding_window, work_model());
  const size_t me = size_t(parts.replica_rank);
  work.pairs += p.pairs[me];
  work.baseline_pairs.resize(p.baseline_pairs.size());
  for (size_t r = 0; r < p.baseline_pairs.size(); ++r) work.baseline_pairs[r] += p.baseline_pairs[r];
  work.spread += p.balanced;
  Batch mine = take_rows(full, p.rows[me], B, S / cp);
  mine.spread = p.balanced;
  return mine;
}

// Forward + backward FLOPs of a token through the linear layers and of a visible pair.
WorkModel TrainLoop::work_model() const {
  return {train_flops(mc, 1, 0).total(), train_flops(mc, 0, 1).total()};
}

// Every rank's figures of the step, and whether and why any rank must stop (a signal, too
// close to --time-limit for another step and a checkpoint, --stop-at), in one collective.
RankFigures TrainLoop::gather_figures(const PhaseClock& clock, int64_t step, double work_flops) {
  const auto& ph = clock.seconds;
  const double bytes = bytes_sent(), peer_wait = peer_wait_s();
  slowest_step_ = std::max(slowest_step_, clock.total());
  const bool near_limit =
      o.time_limit > 0 &&
      process_seconds() + 1.5 * (slowest_step_ + last_io_ + last_eval_) + 2 > o.time_limit;
  const double why = stop_signal() ? double(stop_signal())
                     : near_limit   ? kStopTimeLimit
                     : step == o.stop_at ? kStopAt
                                         : 0;
  const std::vector<double> mine = {
      clock.total(), ph[size_t(Phase::AttnFwd)] + ph[size_t(Phase::AttnBwd)],
      ph[size_t(Phase::Comm)], ph[size_t(Phase::Allreduce)], bytes - bytes_before_,
      peer_wait - peer_wait_before_, work_flops, steal_in_step(clock), why, omp_get_wtime() - last_timing_write_};
  bytes_before_ = bytes;
  peer_wait_before_ = peer_wait;
  return {allgather(mine, ctx.world.comm, "the allgather of the step's per-rank figures"),
          ctx.world.size};
}

// Seconds a hypervisor ran other work on this rank's CPUs since the step began, mean over them.
double TrainLoop::steal_in_step(const PhaseClock& clock) const {
  if (steal_injected_) return kStolenShare * clock.total();  // the test hook (common/fault.hpp)
  return (stolen_seconds(ctx.topo.cpuset) - steal_at_start_) / double(ctx.topo.cpuset.size());
}

double TrainLoop::peer_wait_s() const {
  return (parts.cp_attention ? parts.cp_attention->peer_wait_s() : 0) +
         (parts.spread_attention ? parts.spread_attention->peer_wait_s() : 0);
}

double TrainLoop::bytes_sent() const {
  return (parts.cp_attention ? double(parts.cp_attention->bytes_sent()) : 0) +
         (parts.spread_attention ? double(parts.spread_attention->bytes_sent()) : 0) +
         double(parts.reducer->bytes_sent) +
         (parts.model->tp() ? double(parts.model->tp()->bytes_sent()) : 0) +
         (parts.model->param_shards() ? double(parts.model->param_shards()->bytes_sent()) : 0);
}

// lctrain eval's evaluation of the model as it is after this step, forward only in the
// training model itself (no copy of the weights), over this rank's cp group as eval --cp runs
// it. The dp replicas share the batches (EvalShare) and every rank merges every replica's
// part into the whole result. It reads only --eval-data: the training loader, the gradients
// and the optimizer are untouched, so the training goes on bit for bit as without.
EvalResult TrainLoop::evaluate_held_out() {
  const MPI_Comm cp_comm = mesh.comm("cp");
  MpiStepReducer sums(cp_comm);
  const ParallelPlan& plan = layout.plan;
  const EvalCp cp = plan.cp > 1 ? mpi_eval_cp(cp_comm, plan.split_for(mc.sliding_window, o.seq_len),
                                              plan.shard_group(), sums)
                                : EvalCp{};
  PhaseClock clock;  // the step's phases are recorded already; evaluation is not one of them
  const double t0 = omp_get_wtime();
  const EvalShare share{plan.dp, mesh.index("dp")};
  const EvalResult part =
      evaluate(*parts.model, *eval_data, o.seq_len, o.batch_size, o.eval_sequences, clock, {}, cp, share);
  const EvalResult r = merge_replicas(part, mesh.comm("dp"));
  bytes_before_ = bytes_sent();  // its traffic and waits are no step's
  peer_wait_before_ = peer_wait_s();
  // The next step may be followed by an evaluation too: --time-limit keeps room for one.
  last_eval_ = omp_get_wtime() - t0;
  return r;
}

// "SIGTERM (signal 15) on every rank", "SIGUSR1 (signal 10) on rank 3", "--stop-at".
std::string TrainLoop::stop_reason(const RankFigures& ranks, int64_t step) const {
  if (step == o.stop_at) return "--stop-at";
  std::vector<double> why;
  for (int r = 0; r < ranks.ranks; ++r) why.push_back(ranks.rank(r)[RankFigures::kStopFlag]);
  return lct::stop_reason(why);
}

void TrainLoop::checkpoint() {
  // The position of the next step's loader: at a stage boundary, the next stage's start.
  const DataLoader& next = data.at(state.step + 1);
  state.data_epoch = next.epoch();
  state.data_cursor = next.cursor();
  const double t0 = omp_get_wtime();
  const std::string path = write_checkpoint_of(ctx.world, state);
  ctx.out() << checkpoint_line(path, omp_get_wtime() - t0) << std::endl;
}

// The checkpoint of `st` over `w`: the step's world, or a stop's writer's duplicate of it
// (step_start_save.hpp), the weights and moments being those of st.step in either case.
std::string TrainLoop::write_checkpoint_of(const World& w, const TrainState& st) {
  // A checkpoint holds every tensor whole (the model file's shapes), but no rank gathers
  // them: each writes what it owns straight into the file (io/checkpoint.hpp,
  // CheckpointParts). Owned: its ZeRO-3 pieces (parameters and moments), its ZeRO-1/2 range
  // (moments), its tp slices; what is replicated over the dp x cp ranks (the parameters
  // below stage 3, the moments at stage 0) by the first of them only, the norms (replicated
  // over tp) by tp rank 0 only.
  ParamShards* shards = parts.shards.get();
  AdamW& opt = parts.trainer->optimizer();
  const ParamLayout& local = parts.model->layout();
  float* params = shards ? shards->params() : parts.model->params();
  const std::vector<Shard> all{{0, local.total}}, none;
  const std::vector<Shard>& replica = parts.replica_rank == 0 ? all : none;
  const std::vector<Shard> moments = parts.moment_ranges(replica);
  const CheckpointParts written{&local,
                                parts.split,
                                {params, shards ? shards->pieces() : replica},
                                {opt.m(), moments},
                                {opt.v(), moments},
                                params,
                                shards ? shards->size() : local.total};
  save_checkpoint(w, run_dir, o.run_dir,
                  {&mc, &whole_layout, nullptr, nullptr, nullptr, st, layout,
                   {where.dp_rank, where.cp_rank, st.data_epoch, st.data_cursor}, &written},
                  prov, {o.keep_checkpoints, o.keep_every});
  parts.model->release_master();  // what the write read of a master on a tier leaves memory
  return RunDirectory::path_of(o.run_dir, st.step);
}

void TrainLoop::write_timing(const World& w) {
  agreed(w, [&] {
    if (run_dir) write_timing_file(run_dir->timing_path(), record.table(), prov);
  });
  if (&w == &ctx.world) last_timing_write_ = omp_get_wtime();  // (a stop's writer exits next)
}

// "stage 2 of 3 from step N: ..." when a --seq-len-schedule moves to its next length.
void TrainLoop::announce_stage(int64_t step, int64_t first_step) {
  const int64_t S = schedule.seq_len_at(step);
  if (schedule.staged() && step > first_step && S != schedule.seq_len_at(step - 1))
    ctx.out() << "stage " << schedule.stage_of(step) + 1 << " of " << schedule.stages().size() << " from step "
              << step << ": sequences of " << S << " tokens, " << o.batch_size * o.grad_accum * layout.plan.dp * S
              << " tokens per step" << std::endl;
}

void TrainLoop::checkpoint_into(PhaseClock& clock) {
  checkpoint();
  clock.lap(Phase::IO);
  last_io_ = clock.seconds[size_t(Phase::IO)];
}

// After the step and its checkpoint, outside the step's time, decided alike on every rank:
// the held-out evaluation when due (not when the run must stop now: it may be near
// --time-limit), into `fig`. Returns its line, or "".
std::string TrainLoop::evaluate_if_due(int64_t step, bool stop, StepFigures& fig) {
  if (!eval_data || !(step % o.eval_every == 0 || step == o.steps) || stop) return "";
  const EvalResult r = evaluate_held_out();
  fig.eval_loss = r.mean_loss();
  fig.eval_accuracy = eval_accuracy(r);
  fig.eval_retrieval = eval_retrieval(r);
  return eval_line(step, r);
}

// --max-skips: every rank sees the same reduced loss, so all stop here alike.
void TrainLoop::check_skips(int64_t step) {
  if (state.consecutive_skips < o.max_skips) return;
  write_timing();
  throw AgreedError(cat(state.consecutive_skips, " consecutive steps (to step ", step, ") had a non-finite loss or ",
                        "gradient and were skipped (--max-skips ", o.max_skips, "); the run stops with its last ",
                        "good checkpoint intact (", latest_or_none(run_dir), "); lower --lr, raise ",
                        "--warmup-steps or check the data, then resume"));
}

// One step: its micro-batches, the training step, every rank's figures, then what the
// figures decide alike on every rank: checkpoint, evaluation, record and print, stop.
TrainLoop::Outcome TrainLoop::step(int64_t step, const Pace& pace, PhaseClock& clock) {
  std::ostream& out = ctx.out();
  clock.reset();
  steal_at_start_ = stolen_seconds(ctx.topo.cpuset);
  announce_stage(step, pace.first_step);
  const int64_t S = schedule.seq_len_at(step);
  StepWork work;
  // Where the step's data begins: what a stop inside the step writes (step_start_save.hpp).
  const int64_t epoch = data.at(step).epoch(), cursor = data.at(step).cursor();
  const std::vector<Batch> micro = micro_batches(step, work);
  if (saver_) saver_->open(step, epoch, cursor);  // the batches are read: no file is touched until the gate
  clock.lap(Phase::Other);
  const StepStats st = parts.trainer->train_step(micro, step, clock);
  state.step = step;
  state.tokens_seen += st.real_tokens;
  state.skipped_steps += st.skipped;
  state.consecutive_skips = st.skipped ? state.consecutive_skips + 1 : 0;
  // A rank's share of the step's work: its tokens and its queries' visible pairs, 1/tp of
  // every layer.
  const int64_t rank_tokens = o.grad_accum * o.batch_size * S / layout.plan.cp;
  const double rank_flops = train_flops(mc, double(rank_tokens), work.pairs).total() / double(layout.plan.tp);
  const RankFigures ranks = gather_figures(clock, step, rank_flops);
  clock.lap(Phase::Allreduce);

  // Decisions every rank must take alike come from the gathered figures only.
  const bool stop = ranks.any_stop() && step < o.steps;  // the last step ends normally
  const bool timing_due = ranks.rank(0)[RankFigures::kSinceTimingWrite] > 10;  // rank 0's clock
  const bool due = step == o.steps || stop || (o.checkpoint_every > 0 && step % o.checkpoint_every == 0);
  // A skip streak does not push good checkpoints out, unless the run ends or must stop
  // now (a skipped step leaves the weights as they were: still the last good ones).
  if (due && (state.consecutive_skips == 0 || stop || step == o.steps)) checkpoint_into(clock);

  probe_again_if_beaten(ranks, step);  // outside the step's time: its clock is read
  StepFigures fig{st, state.restarts, o.steps, clock.total(), 0.0, peak, &clock, &ranks, S, schedule.staged()};
  const double train_secs = fig.train_seconds();
  fig.gflops = ranks.mean_work() / train_secs / 1e9;
  if (!work.baseline_pairs.empty())
    fig.unbalanced_imbalance = predicted_imbalance(work.baseline_pairs, rank_tokens, work_model());
  const std::string eval_said = evaluate_if_due(step, stop, fig);
  // --until-retrieval: every rank has the same evaluation, so all end here alike.
  const bool learnt = o.until_retrieval > 0 && fig.eval_retrieval >= o.until_retrieval && step < o.steps;
  if (learnt && !due) {  // its write joins the step's io_s, the probe and evaluation before it do not
    clock.skip();
    checkpoint_into(clock);
    fig.seconds = clock.total();
  }
  record.add(fig);
  if (step % o.log_every == 0 || step == pace.first_step || step == o.steps || stop)
    out << record.step_line(fig, (omp_get_wtime() - pace.start) / double(step - pace.first_step + 1) *
                                     double(o.steps - step))
        << std::endl;
  if (!eval_said.empty()) out << eval_said << std::endl;
  if (step == pace.first_step + 1)
    if (const std::string note = sigterm_grace_note(train_secs, last_io_, saver_ && saver_->enabled());
        !note.empty()) out << note << std::endl;
  check_skips(step);
  if (due || timing_due || learnt) write_timing();
  if (learnt) {
    out << "passkey retrieval " << std::fixed << std::setprecision(1) << 100 * fig.eval_retrieval
        << "% reached --until-retrieval " << 100 * o.until_retrieval << "% at step " << step << " of " << o.steps
        << ": the run ends here, checkpoint '" << RunDirectory::path_of(o.run_dir, step) << "'" << std::endl;
    return Outcome::Learnt;
  }
  if (stop) {
    // The run's last line, whatever the launcher prints after it (Open MPI's "job has been
    // aborted" banner for a non-zero exit): what happened and what to run.
    out << timestamp() << "stopping at step " << step << " of " << o.steps << " (" << stop_reason(ranks, step)
        << "); checkpoint '" << RunDirectory::path_of(o.run_dir, step) << "' written; to continue, run the "
        << "same command with --resume auto (exit code " << int(kExitRequeue) << ")" << std::endl;
    return Outcome::Stopped;
  }
  return Outcome::Continue;
}

// The peak probed again, keeping the higher reading: a probe slowed by other work on the
// cores reads low and every MFU of the run high (a 16K run on a shared host read 117%). The
// table's MFU of this run's steps and the summary follow it; step lines already printed keep
// the figure they had. With --peak-gflops there is nothing to probe.
void TrainLoop::reprobe_peak(const std::string& why) {
  if (o.peak_gflops > 0) return;
  ctx.measure_peak(why);
  const auto [higher, how] = ctx.mfu_peak(precision, 0);
  if (higher <= peak) return;
  record.rebase_mfu(higher);
  peak = higher;
  peak_how = how;
}

// The first step of the run that beats the peak probes it again, before its line is printed.
// Decided from the gathered figures (rank 0's clock), so that every rank joins the probe, and
// once a run: a step can beat even a good probe's figure by noise, and the end probes again.
void TrainLoop::probe_again_if_beaten(const RankFigures& ranks, int64_t step) {
  const double gflops = ranks.mean_work() / ranks.rank(0)[RankFigures::kSeconds] / 1e9;
  if (probed_again_ || o.peak_gflops > 0 || !(gflops > peak)) return;
  probed_again_ = true;
  reprobe_peak(cat(std::fixed, std::setprecision(1), "probed again after step ", step, " ran at ", gflops,
                   " GFLOP/s, above the start-up probe's ", peak, "; the higher reading"));
}

// The end of a run that reached its last step (or --until-retrieval): the summary, the ring's
// traffic, the final table; refused when its last steps were all skipped.
int TrainLoop::finish() {
  std::ostream& out = ctx.out();
  reprobe_peak(Context::kProbesBeforeAndAfter);
  record.finish(out, layout.plan.dp, layout.plan.cp, peak, peak_how);
  if (const AttentionOp::RingReport r = parts.cp_attention ? parts.cp_attention->ring_report() : AttentionOp::RingReport{};
      r.ranks > 0)
    out << "ring traffic of rank 0 in this run: " << std::fixed << std::setprecision(2)
        << double(r.bytes_sent_shm) / 1048576 << " MiB through shared memory, "
        << double(r.bytes_sent - r.bytes_sent_shm) / 1048576 << " MiB through MPI; the last "
        << "micro-batch took " << r.steps << " of " << r.ranks << " ring steps per layer\n";
  if (const AttentionOp* spread = parts.spread_attention.get())
    if (const AttentionOp::RingReport r = spread->ring_report(); r.ranks > 0)
      out << "work-balance ring over the " << r.ranks << " dp x cp ranks, rank 0's traffic in this run: " << std::fixed
          << std::setprecision(2) << double(r.bytes_sent_shm) / 1048576 << " MiB through shared memory, "
          << double(r.bytes_sent - r.bytes_sent_shm) / 1048576 << " MiB through MPI\n";
  write_timing();
  if (const int64_t k = state.consecutive_skips; k > 0)
    throw AgreedError(cat("the run reached step ", o.steps, " but its last ", k, " step(s) had a ",
                          "non-finite loss or gradient and were skipped: the final checkpoint ",
                          latest_or_none(run_dir), " holds the weights of step ", o.steps - k,
                          "; lower --lr, raise --warmup-steps or check the data"));
  if (ctx.world.root())
    out << "wrote " << run_dir->timing_path() << " and " << latest_or_none(run_dir) << std::endl;
  return kExitOk;
}

int TrainLoop::train() {
  const World& world = ctx.world;
  const FaultPlan fault = fault_from_environment();
  steal_injected_ = fault.steals(world.rank);
  PhaseClock clock;
  last_timing_write_ = omp_get_wtime();
  last_io_ = checkpoint_bytes(parts.model->layout()) / 100e6;  // until one is measured: 100 MB/s
  const Pace pace{state.step + 1, omp_get_wtime()};
  // SIGTERM or SIGINT inside a step writes the state the step started from (and exits).
  // `state` is the previous step's until the gate, which a stop inside the step never passes.
  StepStartSave saver(world, [this](const World& w, int64_t data_epoch, int64_t data_cursor) {
    TrainState st = state;
    st.data_epoch = data_epoch;
    st.data_cursor = data_cursor;
    const std::string path = write_checkpoint_of(w, st);
    write_timing(w);
    return path;
  }, o.steps);
  saver_ = &saver;
  parts.trainer->set_before_update([&saver] { saver.gate(); });
  struct Unhook {
    TrainLoop& loop;
    ~Unhook() {
      loop.parts.trainer->set_before_update(nullptr);
      loop.saver_ = nullptr;
    }
  } unhook{*this};
  try {
    for (int64_t s = pace.first_step; s <= o.steps; ++s) {
      watchdog_set_context(cat("step ", s));
      progress.step_started(s);
      fault.fire(world.rank, s);
      if (fault.poisons(world.rank, s) && !parts.model->param_shards()) parts.model->params()[0] = std::nanf("");
      const Outcome done = step(s, pace, clock);
      if (done == Outcome::Learnt) break;
      if (done == Outcome::Stopped) return kExitRequeue;
    }
  } catch (const AgreedError&) {
    throw;
  } catch (const std::exception& e) {
    // One rank failed alone while the others may be waiting for it in a collective call.
    if (world.size == 1) throw;
    abort_job(world, e.what());
  }
  return finish();
}

}  // namespace lct
