// lctrain train: load, check, lay the ranks on a dp x cp x tp mesh, train, record every step.
// The steps of a run, in order: check (every rank alike, nothing allocated: train_inputs.cpp),
// open the run directory (rank 0: lock, tidy, set an earlier run aside), build the model and
// its parts (train_parts.cpp), find where to start (a fresh lineage or a checkpoint), then the
// step loop (train_loop.cpp).
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>

#include "app/cli/context.hpp"
#include "app/training/attention_choice.hpp"
#include "app/training/curriculum.hpp"
#include "app/cli/parallel_options.hpp"
#include "app/training/train_checkpoint.hpp"
#include "app/training/train_inputs.hpp"
#include "app/training/train_loop.hpp"
#include "app/training/train_parts.hpp"
#include "app/training/train_record.hpp"
#include "app/training/train_setup.hpp"
#include "common/error.hpp"
#include "io/checkpoint.hpp"
#include "io/dataset_file.hpp"
#include "io/model_file.hpp"
#include "io/run_dir.hpp"
#include "io/timing_file.hpp"
#include "model/shard.hpp"
#include "parallel/mesh.hpp"
#include "parallel/watchdog.hpp"
#include "sys/memory.hpp"
#include "sys/stop.hpp"
#include "train/data_loader.hpp"

namespace lct {

namespace {

// Refuses (or with --allow-data-change, warns about) a resume on other data than the
// checkpoint's. Checkpoints from before data identities carry none: nothing to compare.
void check_same_data(const TrainState& saved, const DataIdentity& now, const std::string& used,
                     const TrainOptions& o, std::ostream& out) {
  if (saved.data.fingerprint.empty() || saved.data.same_data(now)) return;
  const std::string what = cat("checkpoint '", used, "' was trained on other data (",
                               saved.data.describe(), ") than --data '", o.data, "' (",
                               now.describe(), ")");
  if (!o.allow_data_change)
    throw AgreedError(cat(what, "; resume with the dataset it was trained on, or pass ",
                          "--allow-data-change to continue on this one"));
  out << "warning: " << what << "; continuing on it (--allow-data-change): its order goes on "
      << "from epoch " << saved.data_epoch << ", position " << saved.data_cursor << "\n";
}

// What a resume keeps beyond the checkpoint's own checks (io): the seed, the tokenizer (other
// ids for the same text: --allow-data-change does not cover it) and the data.
void check_resumed_state(const TrainState& loaded, const std::string& used, const TrainOptions& o,
                         const TokenizerInfo& tokenizer, const DataIdentity& data, std::ostream& out) {
  if (loaded.data_seed != o.seed)
    throw AgreedError(cat("checkpoint '", used, "' was trained with --seed ", loaded.data_seed,
                          " but this run has --seed ", o.seed, "; resume with the same seed"));
  if (!loaded.tokenizer.name.empty() && !loaded.tokenizer.same(tokenizer))
    throw AgreedError(cat("checkpoint '", used, "' was trained with the tokenizer ",
                          loaded.tokenizer.describe(), " but --data '", o.data, "' was made with ",
                          tokenizer.describe(), ": its ids mean other text; resume on data prepared ",
                          "with the checkpoint's tokenizer (prepare --tokenizer-model with its ",
                          "/tokenizer/model bytes)"));
  check_same_data(loaded, data, used, o, out);
}

// What a resume under other degrees or another batch shape changes (checkpoints hold every
// tensor whole, so any layout can continue one).
std::string layout_change(const RunLayout& was, const RunLayout& now, const TrainState& at) {
  auto describe = [](const RunLayout& l) {
    const int64_t tp = l.world_size / std::max<int64_t>(1, l.plan.dp * l.plan.cp);  // the rest of the world
    return cat(l.world_size, " rank(s) (dp ", l.plan.dp, " x cp ", l.plan.cp, tp > 1 ? cat(" x tp ", tp) : "", "), ",
               l.sequences_per_step(),
               " sequences per step (dp x batch ", l.batch_size, " x accumulation ", l.grad_accum, ")");
  };
  const std::string head = cat("resuming across a layout change: the checkpoint's run had ", describe(was),
                               ", this one has ", describe(now), "; ");
  if (was.sequences_per_step() == now.sequences_per_step())
    return head + cat("every step takes the same sequences as before (the data goes on from epoch ",
                      at.data_epoch, ", sequence ", at.data_cursor, "), summed in another order: the losses ",
                      "equal an unchanged run's to rounding, not bit for bit");
  return head + cat("the data goes on from epoch ", at.data_epoch, ", sequence ", at.data_cursor, ", but each step now ",
                    "takes ", now.sequences_per_step(), " sequences instead of ", was.sequences_per_step(),
                    " (more tokens per update: consider scaling --lr); the learning-rate schedule goes on by step");
}

// Where the run starts: a new lineage from the model file, or the state of the checkpoint
// --resume finds (same seed, same data). The run directory is made to agree with it: a
// rollback to one of its own checkpoints sets the later ones aside and points `latest` at
// it; --resume auto that finds no checkpoint sets aside a table a killed run left behind.
// A fresh start records where its weights come from (`origin`) and, with --init-moments,
// takes that checkpoint's AdamW moments into req.into.
TrainState start_state(const World& world, std::ostream& out, const TrainOptions& o,
                       RunDirectory* run, const ResumeRequest& req, const DataIdentity& data,
                       const InitOrigin& origin, const TokenizerInfo& tokenizer, TrainRecord& record) {
  TrainState state;
  state.data_seed = o.seed;
  state.data = data;
  state.init_from = origin;
  state.tokenizer = tokenizer;
  std::string used;
  RunLayout saved;
  const std::optional<TrainState> loaded =
      o.resume == "none" ? std::nullopt : resume_checkpoint(world, out, req, &used, &saved);
  if (!loaded) {
    state.run_id = broadcast_string(new_run_id(), world.comm);
    if (o.resume == "auto")
      out << "no checkpoint in '" << o.run_dir << "/checkpoints': starting from '" << o.model << "'\n";
    agreed(world, [&] {
      if (!run) return;
      if (const std::string moved = o.resume == "auto" ? run->set_aside_timing() : ""; !moved.empty())
        out << "the timing table of a run stopped before its first checkpoint was moved to '"
            << moved << "'\n";
      run->set_run_id(state.run_id);
    });
    if (o.init_moments) {
      agreed(world, [&] {
        read_checkpoint_moments(o.model, *req.layout, req.into);
      });
      out << "AdamW moments from '" << o.model << "' (step " << origin.step << "); bias correction "
          << "restarts at step 1 of this run\n";
    }
    return state;
  }
  check_resumed_state(*loaded, used, o, tokenizer, data, out);
  if (!(saved == req.run)) out << layout_change(saved, req.run, *loaded) << "\n";
  state = *loaded;
  state.data = data;
  state.tokenizer = tokenizer;
  state.restarts += 1;
  // A checkpoint from before lineages starts one.
  if (state.run_id.empty()) state.run_id = broadcast_string(new_run_id(), world.comm);
  agreed(world, [&] {
    if (!run) return;
    if (o.resume != "auto" && run->holds_checkpoint(used)) {
      if (const std::string moved = run->set_aside_checkpoints_after(state.step); !moved.empty())
        out << "rolled back to step " << state.step << ": the later checkpoints were moved to '"
            << moved << "'\n";
      run->mark_latest(state.step);
    }
    if (run->run_id() != state.run_id) run->set_run_id(state.run_id);
    if (std::filesystem::exists(run->timing_path()) &&
        !record.continue_from(read_timing_file(run->timing_path()), o.seq_len))
      fail("timing table '", run->timing_path(), "' does not match this run's columns; move it ",
           "away to resume");
  });
  out << "resumed from '" << used << "' at step " << state.step << " (restart " << state.restarts
      << ", " << state.tokens_seen << " tokens seen)\n";
  return state;
}

// How this run is laid out, as its checkpoints record it (and a resume compares).
RunLayout run_layout(const World& world, const TrainOptions& o, const ParallelPlan& plan, const TrainInputs& in) {
  return {world.size, plan, o.seq_len, o.batch_size, o.grad_accum, in.schedule->text()};
}

// --dry-run: the checks of steps 2 and 4 that write nothing: a previous run in --run-dir (as
// train refuses it) and the checkpoint a resume would take, found and checked as the run
// would (model, length, schedule, seed, tokenizer, data; past an unusable newest one to the
// one before), reading no tensor; and the warnings the run prints.
int dry_run(const World& world, const TrainOptions& o, const ParallelPlan& plan, const TrainInputs& in,
            std::ostream& out) {
  const ModelConfig& mc = in.config();
  if (const std::string w = seq_len_warning(mc, o.seq_len); !w.empty()) out << w << "\n";
  agreed(world, [&] {
    if (world.root()) check_previous_run(RunDirectory(o.run_dir, false), o);
  });
  if (o.resume != "none") {
    const RunLayout layout = run_layout(world, o, plan, in);
    ResumeRequest req{o.resume, o.run_dir, &mc, &in.init.layout, {}, layout, {}, true};
    std::string used;
    RunLayout saved;
    if (const std::optional<TrainState> loaded = resume_checkpoint(world, out, req, &used, &saved)) {
      check_resumed_state(*loaded, used, o, tokenizer_info(in.dataset->info()), identify(*in.dataset), out);
      out << "dry run: would resume from '" << used << "' at step " << loaded->step << "\n";
    } else if (o.resume == "auto") {
      out << "dry run: no checkpoint in '" << o.run_dir << "/checkpoints': would start from '" << o.model << "'\n";
    }
  }
  out << "dry run: every check passed; nothing allocated or written" << std::endl;
  return kExitOk;
}

// The loader of the step after the checkpoint at the checkpoint's data position
// (curriculum.hpp); a checkpoint of an older packing rule goes on under today's, with a
// warning where that changes the order.
DataLoader& position_data(std::ostream& out, StagedData& data, TrainState& state) {
  DataLoader& loader = data.at(state.step + 1);
  loader.seek(state.data_epoch, state.data_cursor);
  if (state.packing_rule != kPackingRule) {
    // Only documents longer than a sequence pack differently under rule 2.
    if (loader.packing().split_docs > 0)
      out << "warning: the checkpoint's run packed documents longer than a sequence by an older "
          << "rule (packing rule " << state.packing_rule << ", now " << kPackingRule << "): its "
          << "data order goes on from epoch " << state.data_epoch << ", position "
          << state.data_cursor << " of the new packing, so some sequences of this epoch may "
          << "repeat or be missed\n";
    state.packing_rule = kPackingRule;
  }
  return loader;
}

// "data: N sequences of S tokens (packing ...); global batch ...", and the MFU peak.
void print_data_line(std::ostream& out, const TrainOptions& o, const ParallelPlan& plan, const ModelConfig& mc,
                     const DataLoader& loader, int64_t S, double peak, const std::string& peak_how) {
  const int64_t sequences = o.batch_size * o.grad_accum * plan.dp;
  out << "data: " << loader.packing().sequences.size() << " sequences of " << S << " tokens (packing efficiency "
      << std::fixed << std::setprecision(1) << 100 * loader.packing().efficiency() << "%); global batch "
      << sequences << " sequences = " << sequences * S << " tokens"
      << (plan.cp > 1 ? cat(", each sequence split over ", plan.cp, " ranks (",
                            cp_split_name(plan.split_for(mc.sliding_window, S)), ", ", plan.cp_description(), ")")
                      : std::string())
      << "\npeak for MFU: " << peak << " GFLOP/s per rank (" << peak_how << ")\n"
      << std::flush;
}

// The attributes of every file the run writes: rank 0's date and host (files written by
// several ranks carry identical attributes), and where the run's weights come from (kept by
// resumes: the first run's origin).
Provenance run_provenance(const Context& ctx, const InitOrigin& from) {
  Provenance prov = ctx.provenance();
  prov.date = broadcast_string(prov.date, ctx.world.comm);
  prov.host = broadcast_string(prov.host, ctx.world.comm);
  prov.config.push_back({"train", "init_from_step", from.step,
                         "step of the checkpoint --model names (0: a model file)"});
  prov.config.push_back({"train", "init_from_run_id", from.run_id, "run id of that checkpoint"});
  prov.config.push_back({"train", "init_from_data_fingerprint", from.data.fingerprint,
                         "fingerprint of the data that checkpoint was trained on"});
  return prov;
}

}  // namespace

int cmd_train(Context& ctx) {
  const double process_bytes = peak_rss_mib() * double(1 << 20);  // before anything is read
  const TrainOptions& o = ctx.inv.train;
  const World& world = ctx.world;
  std::ostream& out = ctx.out();
  install_stop_handlers();
  if (world.root()) std::cout.flush().rdbuf(stop_aware_stdout());
  const WatchdogRun watchdog(o.comm_timeout, o.time_limit, world.rank);
  ctx.print_startup("train", true);
  StepProgress progress(world.root() ? &out : nullptr, o.progress_every, o.steps);

  // 1. Checks, alike on every rank; nothing allocated or written yet.
  const ParallelPlan plan = parallel_plan(o, world.size);
  // tp innermost: the ranks of a tp group are neighbours on one node when the counts allow.
  Mesh mesh(world, {{"dp", int(plan.dp)}, {"cp", int(plan.cp)}, {"tp", int(plan.tp)}});  // throws alike on every rank
  out << mesh.layout_table();
  progress.phase("reading the model and the data");
  TrainInputs in = read_train_inputs(ctx, plan, out);
  report_train_inputs(out, o, plan, in);
  const AttnKernel attention = choose_attention_kernel(ctx, plan, in, out);
  const ModelConfig& mc = in.config();
  check_memory(out, o, plan, mc, in.shape, in.optimizer_tier, ctx.topo.threads, world.node_size, world.size,
               process_bytes);
  if (o.dry_run) return dry_run(world, o, plan, in, out);

  // 2. The run directory (rank 0's; the others wait to agree).
  std::unique_ptr<RunDirectory> run = open_run_directory(world, o, ctx.topo.host, out, checkpoint_bytes(in.init.layout));
  if (const std::string w = seq_len_warning(mc, o.seq_len); !w.empty()) out << w << "\n";

  // 3. The model, its optimizer and its data.
  progress.phase("building the model and its parts");
  const std::unique_ptr<TrainParts> parts = build_train_parts(o, plan, mesh, in, out);
  StagedData data(in.dataset->info(), *in.schedule, uint64_t(o.seed));

  // 4. Where to start: weights, AdamW moments, step, data position and counters. A
  // checkpoint (--resume, --init-moments) is read straight into the buffers that keep it.
  const RunLayout layout = run_layout(world, o, plan, in);
  const RankState where{mesh.index("dp"), mesh.index("cp"), 0, 0};
  const auto tells = [](const AttentionOp* op) { return op && op->tells_peer_wait(); };
  TrainRecord record(world.size, tells(parts->cp_attention.get()) || tells(parts->spread_attention.get()));
  progress.phase(o.resume == "none" ? "setting up the first step" : "reading the checkpoint to resume from");
  TrainState state = start_state(world, out, o, run.get(),
                                 {o.resume, o.run_dir, &mc, &in.init.layout, parts->checkpoint_targets(), layout, where},
                                 identify(*in.dataset), in.origin, tokenizer_info(in.dataset->info()), record);
  state.attention_kernel = attn_kernel_name(attention);
  parts->model->release_master();  // a master on a tier: what start-up wrote goes there
  const DataLoader& loader = position_data(out, data, state);
  if (state.step >= o.steps) {
    out << "the run is already complete: step " << state.step << " of --steps " << o.steps << "\n";
    return kExitOk;
  }

  // 5. The steps.
  progress.phase("measuring the peak");
  ctx.measure_peak();
  const auto [peak, peak_how] = ctx.mfu_peak(in.precision, o.peak_gflops);
  if (const std::string w = ctx.bf16_warning(in.precision); !w.empty()) out << w << "\n";
  print_data_line(out, o, plan, mc, loader, in.schedule->seq_len_at(state.step + 1), peak, peak_how);
  TrainLoop loop{ctx,    o,      mc,         mesh,  *parts, *in.dataset, *in.schedule, data, in.eval_data.get(),
                 state,  record, run.get(),  layout, where, run_provenance(ctx, state.init_from),
                 peak,   peak_how, in.precision, in.init.layout, progress};
  return loop.train();
}

}  // namespace lct
