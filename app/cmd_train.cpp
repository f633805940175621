// lctrain train: load, check, lay the ranks on a dp x cp mesh, train, record every step.
#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>

#include "app/context.hpp"
#include "app/train_checkpoint.hpp"
#include "app/train_record.hpp"
#include "app/train_setup.hpp"
#include "common/error.hpp"
#include "io/atomic.hpp"
#include "io/dataset_file.hpp"
#include "io/model_file.hpp"
#include "io/run_dir.hpp"
#include "io/timing_file.hpp"
#include "kernels/gemm.hpp"
#include "model/flops.hpp"
#include "model/shard.hpp"
#include "parallel/mesh.hpp"
#include "parallel/reducer.hpp"
#include "parallel/ring_attention.hpp"
#include "parallel/watchdog.hpp"
#include "sys/stop.hpp"
#include "train/data_loader.hpp"
#include "train/trainer.hpp"

namespace lct {

int cmd_train(Context& ctx) {
  const TrainOptions& o = ctx.inv.train;
  const World& world = ctx.world;
  std::ostream& out = ctx.out();
  install_stop_handlers();
  watchdog_start(o.comm_timeout, o.time_limit, world.rank);
  struct StopWatchdog {
    ~StopWatchdog() { watchdog_stop(); }
  } stop_watchdog_on_return;
  ctx.print_startup("train", true);

  const auto [dp, cp] = degrees(o, world.size);
  Mesh mesh(world, {{"dp", int(dp)}, {"cp", int(cp)}});  // throws alike on every rank
  out << mesh.layout_table();
  const int dp_rank = mesh.index("dp"), cp_rank = mesh.index("cp");

  ModelData init = read_model_file(o.model);
  const TokenDataset ds = read_dataset_file(o.data);
  check_inputs(o, init.config, ds, cp);
  const Fault fault = injected_fault();
  const ModelConfig& mc = init.config;
  const int64_t local_tokens = o.batch_size * o.seq_len / cp;
  const Precision precision = parse_precision(o.precision);
  const ModelShape shape{local_tokens, o.seq_len, parse_checkpointing(o.checkpointing),
                         {o.block_q, o.block_k}, ctx.attention_isa(precision), precision};
  const ModelMemory mem = LlamaModel::memory(mc, shape, ctx.topo.threads);
  const double ring_bytes = cp > 1 ? 7.0 * double(local_tokens * mc.num_key_value_heads * mc.head_dim()) * 4 : 0;
  const double need = double(mem.total()) + ring_bytes;
  const double avail = available_memory_gib() * double(1u << 30) / double(world.node_size);
  out << "model: " << init.layout.num_parameters() << " parameters, " << mc.num_hidden_layers
      << " layers, hidden " << mc.hidden_size << ", heads " << mc.num_attention_heads << "/"
      << mc.num_key_value_heads << " x " << mc.head_dim() << "\n"
      << "memory estimate per rank (" << o.precision << "): " << gib(need) << " = parameters+gradients"
      << (precision == Precision::Bf16 ? "+bf16 copy " : " ") << gib(double(mem.params_grads)) << ", AdamW " << gib(double(mem.optimizer)) << ", activations "
      << gib(double(mem.activations)) << " (checkpointing " << o.checkpointing << ", "
      << local_tokens << " tokens per rank), scratch " << gib(double(mem.scratch) + ring_bytes)
      << "; " << gib(avail) << " available per rank\n";
  if (avail > 0 && need > 0.95 * avail)
    fail("this run needs about ", gib(need), " per rank but ", gib(avail), " are available; use ",
         "--checkpointing full, a shorter --seq-len, a smaller --batch-size or a larger --cp");
  if (o.dry_run) {
    out << "dry run: every check passed; nothing allocated or written" << std::endl;
    return kExitOk;
  }
  // Every check passed: only now touch the disk (rank 0 writes; the others wait to agree).
  std::unique_ptr<RunDirectory> run;
  agreed(world, [&] {
    if (!world.root()) return;
    run = std::make_unique<RunDirectory>(o.run_dir);
    run->remove_stale_temporaries();
    if (run->has_previous_run() && !o.force && o.resume == "none")
      fail("run directory '", o.run_dir, "' holds a previous run (timing.h5 or checkpoints); ",
           "pass --resume auto to continue it, --force to start over in it, or choose another --run-dir");
    check_free_space(run->checkpoint_path(0), checkpoint_bytes(init.layout), "a checkpoint in");
  });
  if (o.seq_len > mc.max_position_embeddings)
    out << "warning: --seq-len " << o.seq_len << " exceeds the model's max_position_embeddings "
        << mc.max_position_embeddings << "\n";

  std::unique_ptr<AttentionOp> cp_attention;
  if (cp > 1) {
    const MPI_Comm c = mesh.comm("cp");
    if (o.cp_algo == "ring")
      cp_attention = std::make_unique<RingAttention>(c, local_tokens, mc.num_attention_heads,
                                                     mc.num_key_value_heads, mc.head_dim(),
                                                     shape.blocks, shape.isa, precision);
    else
      cp_attention = std::make_unique<AllGatherAttention>(c, local_tokens, mc.num_attention_heads,
                                                          mc.num_key_value_heads, mc.head_dim(),
                                                          shape.blocks, shape.isa, precision);
  }
  auto cp_bytes = [&]() -> double {
    if (auto* r = dynamic_cast<RingAttention*>(cp_attention.get())) return double(r->bytes_sent());
    if (auto* a = dynamic_cast<AllGatherAttention*>(cp_attention.get())) return double(a->bytes_sent());
    return 0;
  };
  LlamaModel model(mc, shape, cp_attention.get());
  std::copy(init.params.data(), init.params.data() + init.layout.total, model.params());
  init.params = Buffer<float>();
  MpiStepReducer reducer(world.comm, precision);
  const AdamWConfig ac{o.lr, o.min_lr, o.warmup_steps, o.steps, o.beta1, o.beta2, o.eps,
                       o.weight_decay, o.decay_norms_embeddings, o.grad_clip};
  Trainer trainer(model, ac, world.size > 1 ? &reducer : nullptr);
  DataLoader loader(ds, o.seq_len, uint64_t(o.seed));
  const CpSplit split = o.cp_split == "zigzag" ? CpSplit::Zigzag : CpSplit::Contiguous;

  // Resume: weights, AdamW moments, step, data position and counters from a checkpoint.
  const RunLayout layout{world.size, dp, cp, o.seq_len, o.batch_size, o.grad_accum};
  TrainState state;
  state.data_seed = o.seed;
  TrainRecord record(world.size);
  if (o.resume != "none") {
    std::string used;
    const std::optional<TrainState> loaded = resume_checkpoint(
        world, out,
        {o.resume, o.run_dir, &mc, &model.layout(),
         {model.params(), trainer.optimizer().m(), trainer.optimizer().v()}, layout,
         {dp_rank, cp_rank, 0, 0}},
        &used);
    if (loaded) {
      if (loaded->data_seed != o.seed)
        throw AgreedError(cat("checkpoint '", used, "' was trained with --seed ", loaded->data_seed,
                              " but this run has --seed ", o.seed, "; resume with the same seed"));
      state = *loaded;
      state.restarts += 1;
      loader.seek(state.data_epoch, state.data_cursor);
      agreed(world, [&] {  // rank 0 keeps the timing table going
        if (world.root() && std::filesystem::exists(run->timing_path()) &&
            !record.continue_from(read_timing_file(run->timing_path())))
          fail("timing table '", run->timing_path(), "' does not match this run's columns; move it ",
               "away to resume");
      });
      out << "resumed from '" << used << "' at step " << state.step << " (restart " << state.restarts
          << ", " << state.tokens_seen << " tokens seen)\n";
    } else {
      out << "no checkpoint in '" << o.run_dir << "/checkpoints': starting from '" << o.model << "'\n";
    }
  }
  if (state.step >= o.steps) {
    out << "the run is already complete: step " << state.step << " of --steps " << o.steps << "\n";
    return kExitOk;
  }

  ctx.measure_peak();
  const auto [peak, peak_how] = ctx.mfu_peak(precision, o.peak_gflops);
  if (const std::string w = ctx.bf16_warning(precision); !w.empty()) out << w << "\n";
  out << "data: " << loader.packing().sequences.size() << " sequences of " << o.seq_len
      << " tokens (packing efficiency " << std::fixed << std::setprecision(1)
      << 100 * loader.packing().efficiency() << "%); global batch " << o.batch_size * o.grad_accum * dp
      << " sequences = " << o.batch_size * o.grad_accum * dp * o.seq_len << " tokens"
      << (cp > 1 ? ", each sequence split over " + std::to_string(cp) + " ranks (" + o.cp_split +
                       ", " + o.cp_algo + ")"
                 : std::string())
      << "\npeak for MFU: " << peak << " GFLOP/s per rank (" << peak_how << ")\n"
      << std::flush;

  // Files written by several ranks carry identical attributes: rank 0's date and host.
  Provenance prov = ctx.provenance();
  prov.date = broadcast_string(prov.date, world.comm);
  prov.host = broadcast_string(prov.host, world.comm);
  const RetentionPolicy keep{o.keep_checkpoints, o.keep_every};
  auto checkpoint = [&] {
    state.data_epoch = loader.epoch();
    state.data_cursor = loader.cursor();
    const double t0 = omp_get_wtime();
    save_checkpoint(world, run.get(), o.run_dir,
                    {&mc, &model.layout(), model.params(), trainer.optimizer().m(),
                     trainer.optimizer().v(), state, layout,
                     {dp_rank, cp_rank, state.data_epoch, state.data_cursor}},
                    prov, keep);
    if (world.root())
      out << checkpoint_line(RunDirectory::path_of(o.run_dir, state.step), omp_get_wtime() - t0) << std::endl;
  };
  auto write_timing = [&] {
    agreed(world, [&] {
      if (world.root()) write_timing_file(run->timing_path(), record.table(), prov);
    });
  };

  PhaseClock clock;
  double last_timing_write = omp_get_wtime(), bytes_before = 0, slowest_step = 0;
  double last_io = checkpoint_bytes(model.layout()) / 100e6;  // until one is measured: 100 MB/s
  const double run_start = omp_get_wtime();
  const int64_t first_step = state.step + 1;
  try {
    for (int64_t step = first_step; step <= o.steps; ++step) {
      watchdog_set_context(cat("step ", step));
      fault.maybe_fire(world.rank, step);
      clock.reset();
      std::vector<Batch> micro;
      double pairs = 0;
      for (int64_t a = 0; a < o.grad_accum; ++a) {
        std::vector<const PackedSequence*> seqs = loader.take(o.batch_size * dp);
        seqs = {seqs.begin() + dp_rank * o.batch_size, seqs.begin() + (dp_rank + 1) * o.batch_size};
        Batch full = make_batch(ds, seqs, o.seq_len);
        pairs += visible_pairs(full);
        micro.push_back(cp > 1 ? shard_batch(full, cp, cp_rank, split) : std::move(full));
      }
      clock.lap(Phase::Other);
      const StepStats st = trainer.train_step(micro, step, clock);
      state.step = step;
      state.tokens_seen += st.real_tokens;
      state.skipped_steps += st.skipped;
      state.consecutive_skips = st.skipped ? state.consecutive_skips + 1 : 0;

      // Every rank's figures, and whether any rank must stop (a signal, or too close to
      // --time-limit for another step and a checkpoint), in one collective.
      const auto& ph = clock.seconds;
      const double bytes = cp_bytes() + double(reducer.bytes_sent);
      slowest_step = std::max(slowest_step, clock.total());
      const bool near_limit =
          o.time_limit > 0 && process_seconds() + 1.5 * (slowest_step + last_io) + 2 > o.time_limit;
      const double mine[RankFigures::kCount] = {
          clock.total(), ph[size_t(Phase::AttnFwd)] + ph[size_t(Phase::AttnBwd)],
          ph[size_t(Phase::Comm)], ph[size_t(Phase::Allreduce)], bytes - bytes_before,
          double(stop_signal() != 0 || near_limit || step == o.stop_at),
          omp_get_wtime() - last_timing_write};
      bytes_before = bytes;
      RankFigures ranks{std::vector<double>(size_t(RankFigures::kCount * world.size)), world.size};
      {
        WaitScope w("the allgather of the step's per-rank figures");
        MPI_Allgather(mine, RankFigures::kCount, MPI_DOUBLE, ranks.all.data(), RankFigures::kCount,
                      MPI_DOUBLE, world.comm);
      }
      clock.lap(Phase::Allreduce);
      // Decisions every rank must take alike come from the gathered figures only.
      const bool stop = ranks.any_stop() && step < o.steps;  // the last step ends normally
      const bool timing_due = ranks.rank(0)[RankFigures::kSinceTimingWrite] > 10;  // rank 0's clock
      const bool due = step == o.steps || stop ||
                       (o.checkpoint_every > 0 && step % o.checkpoint_every == 0);
      // A skip streak does not push good checkpoints out, unless the run must stop now.
      if (due && (state.consecutive_skips == 0 || stop)) {
        checkpoint();
        clock.lap(Phase::IO);
        last_io = clock.seconds[size_t(Phase::IO)];
      }

      const double secs = clock.total();
      const Flops f = train_flops(mc, double(o.grad_accum * o.batch_size * o.seq_len), pairs);
      const StepFigures fig{st, state.restarts, o.steps, secs, f.total() / double(cp) / secs / 1e9,
                            peak, &clock, &ranks};
      record.add(fig);
      if (step % o.log_every == 0 || step == first_step || step == o.steps || stop)
        out << record.step_line(fig, (omp_get_wtime() - run_start) / double(step - first_step + 1) *
                                         double(o.steps - step))
            << std::endl;
      if (state.consecutive_skips >= o.max_skips) {  // every rank sees the same reduced loss
        write_timing();
        throw AgreedError(cat(
            state.consecutive_skips, " consecutive steps (to step ", step, ") had a non-finite loss or ",
            "gradient and were skipped (--max-skips ", o.max_skips, "); the run stops with its last ",
            "good checkpoint intact (", latest_or_none(run.get()), "); lower --lr, raise ",
            "--warmup-steps or check the data, then resume"));
      }

      if (due || timing_due) {
        write_timing();
        last_timing_write = omp_get_wtime();
      }
      if (stop) {
        out << "stopping at step " << step << " of " << o.steps << " ("
            << (step == o.stop_at ? "--stop-at"
                : stop_signal() ? stop_signal_name()
                                : "--time-limit near")
            << " on some rank); "
            << "checkpoint '" << RunDirectory::path_of(o.run_dir, step)
            << "' written; continue with --resume auto (exit code " << int(kExitRequeue) << ")"
            << std::endl;
        return kExitRequeue;
      }
    }
  } catch (const AgreedError&) {
    throw;
  } catch (const std::exception& e) {
    // One rank failed alone while the others may be waiting for it in a collective call.
    if (world.size == 1) throw;
    abort_job(world, e.what());
  }

  record.finish(out, dp, cp, peak, peak_how);
  write_timing();
  if (world.root()) out << "wrote " << run->timing_path() << " and " << run->latest() << std::endl;
  return kExitOk;
}

}  // namespace lct
