// lctrain train: load, check, lay the ranks on a dp x cp x tp mesh, train, record every step.
// The steps of a run, in order: check (every rank alike, nothing allocated), open the run
// directory (rank 0: lock, tidy, set an earlier run aside), build the model, find where to
// start (a fresh lineage or a checkpoint), then the step loop (train_loop.cpp).
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>

#include "app/context.hpp"
#include "app/curriculum.hpp"
#include "app/rope_options.hpp"
#include "app/train_checkpoint.hpp"
#include "app/train_loop.hpp"
#include "app/train_record.hpp"
#include "app/train_setup.hpp"
#include "common/error.hpp"
#include "io/checkpoint.hpp"
#include "io/dataset_file.hpp"
#include "io/model_file.hpp"
#include "io/run_dir.hpp"
#include "io/timing_file.hpp"
#include "model/shard.hpp"
#include "app/parallel_options.hpp"
#include "parallel/cp_attention.hpp"
#include "parallel/mesh.hpp"
#include "parallel/reducer.hpp"
#include "parallel/ulysses_attention.hpp"
#include "parallel/watchdog.hpp"
#include "parallel/tp_comm_mpi.hpp"
#include "parallel/zero3.hpp"
#include "sys/memory.hpp"
#include "sys/stop.hpp"
#include "train/data_loader.hpp"
#include "train/trainer.hpp"

namespace lct {

namespace {

// The start-up line of a ring (a ring's own, or a hybrid's across its Ulysses groups):
// rank 0's hops and where every rank's go. Collective over the cp group.
void print_cp_attention(std::ostream& out, const AttentionOp* op, const ParallelPlan& plan,
                        const std::string& transport_option) {
  if (!op || op->ring_report().ranks == 0) return;
  const std::string hops = op->ring_hops();
  const std::string rank0 = op->ring_report().transport;
  if (plan.cp_algo == CpAlgo::Hybrid)
    out << "hybrid cp: Ulysses all-to-all over " << plan.ulysses_degree << " consecutive cp ranks x ring over "
        << plan.cp / plan.ulysses_degree << " (--cp-transport " << transport_option << "), rank 0: " << rank0
        << "; " << hops << "\n";
  else
    out << "ring transport (--cp-transport " << transport_option << "), rank 0: " << rank0 << "; " << hops << "\n";
}

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

// Loss weights that score nothing would train on a loss of 0 with no gradient, silently:
// refused. Documents with none are legal (a mask may leave some out) but worth a line.
void check_loss_weights(TokenSource& data, const std::string& path, std::ostream& out) {
  if (!data.has_weights()) return;
  const LossWeightCount w = count_loss_weights(data);
  if (w.weighted == 0)
    throw AgreedError(cat("--data '", path, "': all ", w.targets, " loss weights of its targets are zero, ",
                          "so training would learn nothing (loss 0, no gradient); prepare it with ",
                          "--loss-on all, or give weights that score some targets"));
  if (w.documents_without > 0)
    out << "warning: --data '" << path << "': " << w.documents_without << " of " << data.info().num_docs()
        << " documents have no weighted target (their loss weights are all zero): they are read "
        << "but teach nothing\n";
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
  if (loaded->data_seed != o.seed)
    throw AgreedError(cat("checkpoint '", used, "' was trained with --seed ", loaded->data_seed,
                          " but this run has --seed ", o.seed, "; resume with the same seed"));
  // Other ids for the same text: --allow-data-change does not cover it.
  if (!loaded->tokenizer.name.empty() && !loaded->tokenizer.same(tokenizer))
    throw AgreedError(cat("checkpoint '", used, "' was trained with the tokenizer ",
                          loaded->tokenizer.describe(), " but --data '", o.data, "' was made with ",
                          tokenizer.describe(), ": its ids mean other text; resume on data prepared ",
                          "with the checkpoint's tokenizer (prepare --tokenizer-model with its ",
                          "/tokenizer/model bytes)"));
  check_same_data(*loaded, data, used, o, out);
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

  // 1. Checks, alike on every rank; nothing allocated or written yet.
  const ParallelPlan plan = parallel_plan(o, world.size);
  const int64_t dp = plan.dp, cp = plan.cp, tp = plan.tp;
  // tp innermost: the ranks of a tp group are neighbours on one node when the counts allow.
  Mesh mesh(world, {{"dp", int(dp)}, {"cp", int(cp)}, {"tp", int(tp)}});  // throws alike on every rank
  out << mesh.layout_table();
  ModelData init = read_model_file(o.model);
  // Offsets and attributes only: each rank reads the tokens of its own sequences, step by step.
  const std::unique_ptr<TokenSource> dataset = open_dataset_file(o.data);
  const DatasetInfo& ds = dataset->info();
  // The model's config, with the context extension's RoPE changes (--rope-*), if any.
  const ModelConfig source_config = init.config;
  apply_rope_options(o.rope, init.config, "train");
  init.config.validate(cat("train (the model of '", o.model, "' with the --rope-* options given)"));
  const SeqLenSchedule schedule(o.seq_len_schedule, o.seq_len, o.steps);
  check_inputs(o, plan, init.config, ds, schedule);
  check_same_tokenizer(init.tokenizer, o.model, tokenizer_info(ds), o.data);
  check_loss_weights(*dataset, o.data, out);
  // --eval-data must fit the model as --data must (read a batch at a time, at each evaluation).
  const std::unique_ptr<TokenSource> eval_data = o.eval_every > 0 ? open_dataset_file(o.eval_data) : nullptr;
  if (eval_data) {
    check_fits_model(eval_data->info(), o.eval_data, init.config.vocab_size, o.model);
    check_same_tokenizer(init.tokenizer, o.model, tokenizer_info(eval_data->info()), o.eval_data);
    // Text and copy data ask for no passkeys: their retrieval is no number, never reached.
    if (o.until_retrieval > 0 && eval_data->info().passkey.empty())
      fail("--until-retrieval ", o.until_retrieval, " needs passkeys to retrieve, but --eval-data '",
           o.eval_data, "' has none (its evaluations measure loss only); give passkey or recall ",
           "data, or drop --until-retrieval");
  }
  const std::optional<TrainState> source = read_checkpoint_state(o.model);
  if (o.init_moments && !source)
    fail("--init-moments takes the AdamW moments of a checkpoint, but --model '", o.model,
         "' is a model file, which has none; give a checkpoint (RUN/checkpoints/step_N.h5), or ",
         "drop --init-moments");
  const InitOrigin origin = source ? InitOrigin{o.model, source->step, source->run_id, source->data}
                                   : InitOrigin{o.model, 0, "", {}};
  const ModelConfig& mc = init.config;
  if (const std::string changed = config_changes(source_config, mc); !changed.empty())
    out << "model config of '" << o.model << "' changed: " << changed << "\n";
  if (source)
    out << "initialised from checkpoint '" << o.model << "' (step " << source->step << ", run "
        << (source->run_id.empty() ? "unknown" : source->run_id) << ", trained on "
        << (source->data.fingerprint.empty() ? "unrecorded data" : source->data.describe()) << ")"
        << (o.init_moments ? " with its AdamW moments" : "") << "\n";
  if (schedule.staged())
    out << "sequence lengths (--seq-len-schedule): " << schedule.describe() << "\n";
  const Precision precision = parse_precision(o.precision);
  const ModelShape shape{o.batch_size * o.seq_len / cp, o.seq_len, parse_checkpointing(o.checkpointing),
                         {o.block_q, o.block_k}, ctx.attention_isa(precision), precision,
                         o.tp_sequence_parallel};
  out << "model: " << init.layout.num_parameters() << " parameters, " << mc.num_hidden_layers
      << " layers, hidden " << mc.hidden_size << ", heads " << mc.num_attention_heads << "/"
      << mc.num_key_value_heads << " x " << mc.head_dim()
      << (tp > 1 ? cat("; --tp ", tp, ": each rank holds ", mc.num_attention_heads / tp, "/",
                       mc.num_key_value_heads / tp, " heads, ", mc.intermediate_size / tp,
                       " of the intermediate size and ", mc.vocab_size / tp, " vocabulary rows",
                       o.tp_sequence_parallel
                           ? cat(", and 1/", tp, " of the residual stream's tokens (--tp-sequence-parallel)")
                           : "")
                 : std::string())
      << "\n";
  // The ranks gradients are summed over: dp x cp (a tp group sees the same tokens).
  const MPI_Comm replicas = mesh.comm_except("tp");
  const int replica_rank = comm_rank(replicas), replica_count = comm_size(replicas);
  const int shards = plan.zero >= 1 ? replica_count : 1;  // ranks the ZeRO state is split over
  check_memory(out, o, plan, mc, shape, ctx.topo.threads, world.node_size, world.size, process_bytes);
  if (o.dry_run) {
    out << "dry run: every check passed; nothing allocated or written" << std::endl;
    return kExitOk;
  }

  // 2. The run directory (rank 0's; the others wait to agree).
  std::unique_ptr<RunDirectory> run =
      open_run_directory(world, o, ctx.topo.host, out, checkpoint_bytes(init.layout));
  if (const std::string w = seq_len_warning(mc, o.seq_len); !w.empty()) out << w << "\n";

  // 3. The model, its optimizer and its data.
  std::unique_ptr<AttentionOp> cp_attention = make_cp_attention(plan, mesh.comm("cp"), mc, shape);
  print_cp_attention(out, cp_attention.get(), plan, o.cp_transport);
  if (const std::string note = UlyssesAttention::replication_note(
          plan.ulysses_ranks(), mc.num_attention_heads, mc.num_key_value_heads, "Ulysses");
      !note.empty())
    out << note << "\n";
  // --tp: each rank holds its slices of every tensor (model/tp.hpp), in the local layout;
  // --zero 3: the parameters and gradients live in shards of that layout, each rank keeping
  // its own piece and letting go of the model file's whole weights before anything else is
  // allocated.
  const ParamLayout local = ParamLayout::llama(mc, int(tp));  // tp 1: the whole layout
  const TpSplit split{int(tp), mesh.index("tp")};
  MpiTpComm tp_comm(mesh.comm("tp"));
  std::unique_ptr<MpiParamShards> zero3 =
      plan.zero == 3 && shards > 1 ? std::make_unique<MpiParamShards>(replicas, local, mc) : nullptr;
  // This rank's parameters out of whole ones (the model file's, a checkpoint's): its slices,
  // then its shard of them, or into `params` (the model's).
  auto take_params = [&](const float* whole_params, float* params) {
    Buffer<float> sliced(tp > 1 ? local.total : 0);
    if (tp > 1) tp_take_local(init.layout, local, split, whole_params, sliced.data());
    const float* mine = tp > 1 ? sliced.data() : whole_params;
    if (zero3) zero3->take_mine(mine, zero3->params());
    else std::copy(mine, mine + local.total, params);
  };
  if (zero3) {
    take_params(init.params.data(), nullptr);
    init.params = Buffer<float>();
  }
  LlamaModel model(mc, shape, cp_attention.get(), zero3.get(), tp > 1 ? &tp_comm : nullptr);
  if (!zero3) take_params(init.params.data(), model.params());
  init.params = Buffer<float>();
  MpiStepReducer reducer(replicas, precision);
  const AdamWConfig ac{o.lr, o.min_lr, o.warmup_steps, o.steps, o.beta1, o.beta2, o.eps,
                       o.weight_decay, o.decay_norms_embeddings, o.grad_clip};
  Trainer trainer(model, ac, replica_count > 1 ? &reducer : nullptr, shards, replica_rank, int(plan.zero));
  StagedData data(ds, schedule, uint64_t(o.seed));

  // 4. Where to start: weights, AdamW moments, step, data position and counters.
  const RunLayout layout{world.size, plan, o.seq_len, o.batch_size, o.grad_accum, schedule.text()};
  const RankState where{mesh.index("dp"), mesh.index("cp"), 0, 0};
  TrainRecord record(world.size, cp_attention && cp_attention->tells_peer_wait());
  // A checkpoint (--resume, --init-moments) is read straight into the buffers that keep it:
  // each rank reads only its own blocks of every tensor (its tp slices, its ZeRO-3 pieces of
  // the parameters, its ZeRO range or pieces of the moments; everything it replicates),
  // never a whole copy first (io/checkpoint.hpp, CheckpointTargets). Nothing is read, and
  // nothing changes, when no checkpoint is found.
  const std::vector<Shard> all{{0, local.total}};
  const std::vector<Shard> moment_ranges = !trainer.sharded()    ? all
                                           : trainer.stage() == 3 ? zero3->pieces()
                                                                  : std::vector<Shard>{trainer.optimizer().shard()};
  const CheckpointTargets into{&local,
                               split,
                               {zero3 ? zero3->params() : model.params(), zero3 ? zero3->pieces() : all},
                               {trainer.optimizer().m(), moment_ranges},
                               {trainer.optimizer().v(), moment_ranges}};
  TrainState state = start_state(world, out, o, run.get(),
                                 {o.resume, o.run_dir, &mc, &init.layout, into, layout, where},
                                 identify(*dataset), origin, tokenizer_info(ds), record);
  // A checkpoint's data position is that of the loader of its next step (curriculum.hpp).
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
  if (state.step >= o.steps) {
    out << "the run is already complete: step " << state.step << " of --steps " << o.steps << "\n";
    return kExitOk;
  }

  // 5. The steps.
  ctx.measure_peak();
  const auto [peak, peak_how] = ctx.mfu_peak(precision, o.peak_gflops);
  if (const std::string w = ctx.bf16_warning(precision); !w.empty()) out << w << "\n";
  const int64_t S = schedule.seq_len_at(state.step + 1);
  out << "data: " << loader.packing().sequences.size() << " sequences of " << S
      << " tokens (packing efficiency " << std::fixed << std::setprecision(1)
      << 100 * loader.packing().efficiency() << "%); global batch " << o.batch_size * o.grad_accum * dp
      << " sequences = " << o.batch_size * o.grad_accum * dp * S << " tokens"
      << (cp > 1 ? cat(", each sequence split over ", cp, " ranks (",
                       cp_split_name(plan.split_for(mc.sliding_window, S)), ", ", plan.cp_description(), ")")
                 : std::string())
      << "\npeak for MFU: " << peak << " GFLOP/s per rank (" << peak_how << ")\n"
      << std::flush;
  // Files written by several ranks carry identical attributes: rank 0's date and host.
  Provenance prov = ctx.provenance();
  prov.date = broadcast_string(prov.date, world.comm);
  prov.host = broadcast_string(prov.host, world.comm);
  // Where the run's weights come from (kept by resumes: the first run's origin).
  const InitOrigin& from = state.init_from;
  prov.config.push_back({"train", "init_from_step", from.step,
                         "step of the checkpoint --model names (0: a model file)"});
  prov.config.push_back({"train", "init_from_run_id", from.run_id, "run id of that checkpoint"});
  prov.config.push_back({"train", "init_from_data_fingerprint", from.data.fingerprint,
                         "fingerprint of the data that checkpoint was trained on"});
  TrainLoop loop{ctx,     o,        mc,    *dataset, mesh,   run.get(), model, trainer,
                 reducer, schedule, data,  state,    record, layout,    where, prov,
                 peak,    peak_how, cp_attention.get(), eval_data.get(), init.layout};
  return loop.train();
}

}  // namespace lct
