// lctrain train: load, check, lay the ranks on a dp x cp mesh, train, record every step.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <memory>

#include "app/context.hpp"
#include "common/error.hpp"
#include "common/stats.hpp"
#include "io/checkpoint.hpp"
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
#include "train/data_loader.hpp"
#include "train/trainer.hpp"

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
    {"loss", "nats", "mean cross-entropy over the step's valid targets (all ranks)"},
    {"lr", "", "learning rate of the update"},
    {"grad_norm", "", "global gradient L2 norm before clipping"},
    {"skipped", "", "1 when the update was skipped (loss or gradient not finite)"},
    {"tokens", "tokens", "real (non-padding) tokens of the step, all ranks"},
    {"valid_targets", "tokens", "scored targets of the step, all ranks"},
    {"seconds", "s", "wall time of the step (rank 0)"},
    {"tokens_per_s", "tokens/s", "tokens / seconds"},
    {"gflops", "GFLOP/s", "model FLOPs per rank (recomputation excluded) / seconds"},
    {"mfu", "", "gflops / peak_gflops (per rank)"},
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
    {"peak_rss_mib", "MiB", "process high-water resident memory (rank 0)"},
};
// One value per rank per step: [steps, ranks] datasets.
const ColumnSpec kRankColumns[] = {
    {"rank_seconds", "s", "step time per rank before the gradient allreduce"},
    {"rank_attn_s", "s", "attention compute per rank (forward + backward)"},
    {"rank_comm_s", "s", "exposed context-parallel communication per rank"},
    {"rank_allreduce_s", "s", "allreduce time per rank"},
    {"rank_bytes_sent", "bytes", "bytes sent per rank (ring transfers + allreduce volume)"},
};

std::string gib(double bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GiB", bytes / double(1u << 30));
  return s;
}

std::string duration(double s) {
  char out[32];
  if (s < 120) std::snprintf(out, sizeof out, "%.0fs", s);
  else if (s < 7200) std::snprintf(out, sizeof out, "%.0fm%02.0fs", std::floor(s / 60), std::fmod(s, 60));
  else std::snprintf(out, sizeof out, "%.0fh%02.0fm", std::floor(s / 3600), std::fmod(s / 60, 60));
  return out;
}

// Everything that can be checked before any rank allocates or writes anything.
void check_inputs(const TrainOptions& o, const ModelConfig& mc, const TokenDataset& ds, int64_t cp) {
  check_fits_model(ds, o.data, mc.vocab_size, o.model);
  if (o.seq_len < 2) fail("--seq-len ", o.seq_len, " is too short: it must be at least 2");
  if (o.batch_size < 1 || o.grad_accum < 1 || o.steps < 1)
    fail("--batch-size, --grad-accum and --steps must be at least 1");
  if (o.block_q < 1 || o.block_k < 1) fail("--block-q and --block-k must be at least 1");
  if (cp > 1 && o.seq_len % (2 * cp) != 0)
    fail("--seq-len ", o.seq_len, " is not divisible by 2 x cp = ", 2 * cp,
         ": the zigzag split cuts every sequence into 2 x cp equal chunks; use a multiple, e.g. ",
         (o.seq_len / (2 * cp) + 1) * 2 * cp);
  const int64_t real = int64_t(ds.tokens.size());
  if (real < o.seq_len)
    fail("dataset '", o.data, "' holds ", real, " tokens, fewer than one sequence of --seq-len ",
         o.seq_len, "; use a shorter --seq-len or more data");
}

// Degrees from the flags: dp = 0 takes what cp leaves of the world.
std::pair<int64_t, int64_t> degrees(const TrainOptions& o, int world) {
  if (o.cp < 1) fail("--cp ", o.cp, " must be at least 1");
  if (o.dp < 0) fail("--dp ", o.dp, " must be at least 1 (or 0 for world size / cp)");
  const int64_t dp = o.dp > 0 ? o.dp : std::max<int64_t>(1, world / o.cp);
  return {dp, o.cp};
}

}  // namespace

int cmd_train(Context& ctx) {
  const TrainOptions& o = ctx.inv.train;
  const World& world = ctx.world;
  std::ostream& out = ctx.out();
  ctx.print_startup("train", true);

  const auto [dp, cp] = degrees(o, world.size);
  Mesh mesh(world, {{"dp", int(dp)}, {"cp", int(cp)}});  // throws alike on every rank
  out << mesh.layout_table();
  const int dp_rank = mesh.index("dp"), cp_rank = mesh.index("cp");

  ModelData init = read_model_file(o.model);
  const TokenDataset ds = read_dataset_file(o.data);
  check_inputs(o, init.config, ds, cp);
  const ModelConfig& mc = init.config;
  const int64_t local_tokens = o.batch_size * o.seq_len / cp;
  const ModelShape shape{local_tokens, o.seq_len, parse_checkpointing(o.checkpointing),
                         {o.block_q, o.block_k}};
  const ModelMemory mem = LlamaModel::memory(mc, shape, ctx.topo.threads);
  const double ring_bytes = cp > 1 ? 7.0 * double(local_tokens * mc.num_key_value_heads * mc.head_dim()) * 4 : 0;
  const double need = double(mem.total()) + ring_bytes;
  const double avail = available_memory_gib() * double(1u << 30) / double(world.node_size);
  out << "model: " << init.layout.num_parameters() << " parameters, " << mc.num_hidden_layers
      << " layers, hidden " << mc.hidden_size << ", heads " << mc.num_attention_heads << "/"
      << mc.num_key_value_heads << " x " << mc.head_dim() << "\n"
      << "memory estimate per rank: " << gib(need) << " = parameters+gradients "
      << gib(double(mem.params_grads)) << ", AdamW " << gib(double(mem.optimizer)) << ", activations "
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
  const std::string setup_error = run_agreed(world, [&] {
    if (!world.root()) return;
    run = std::make_unique<RunDirectory>(o.run_dir);
    if (run->has_previous_run() && !o.force)
      fail("run directory '", o.run_dir, "' holds a previous run (timing.h5 or checkpoints); ",
           "pass --force to start over in it, or choose another --run-dir");
  });
  if (!setup_error.empty()) throw Error(setup_error);
  if (o.seq_len > mc.max_position_embeddings)
    out << "warning: --seq-len " << o.seq_len << " exceeds the model's max_position_embeddings "
        << mc.max_position_embeddings << "\n";

  std::unique_ptr<AttentionOp> cp_attention;
  if (cp > 1) {
    const MPI_Comm c = mesh.comm("cp");
    if (o.cp_algo == "ring")
      cp_attention = std::make_unique<RingAttention>(c, local_tokens, mc.num_attention_heads,
                                                     mc.num_key_value_heads, mc.head_dim(), shape.blocks);
    else
      cp_attention = std::make_unique<AllGatherAttention>(c, local_tokens, mc.num_attention_heads,
                                                          mc.num_key_value_heads, mc.head_dim(), shape.blocks);
  }
  auto cp_bytes = [&]() -> double {
    if (auto* r = dynamic_cast<RingAttention*>(cp_attention.get())) return double(r->bytes_sent());
    if (auto* a = dynamic_cast<AllGatherAttention*>(cp_attention.get())) return double(a->bytes_sent());
    return 0;
  };
  LlamaModel model(mc, shape, cp_attention.get());
  std::copy(init.params.data(), init.params.data() + init.layout.total, model.params());
  init.params = Buffer<float>();
  MpiStepReducer reducer(world.comm);
  const AdamWConfig ac{o.lr, o.min_lr, o.warmup_steps, o.steps, o.beta1, o.beta2, o.eps,
                       o.weight_decay, o.decay_norms_embeddings, o.grad_clip};
  Trainer trainer(model, ac, world.size > 1 ? &reducer : nullptr);
  DataLoader loader(ds, o.seq_len, uint64_t(o.seed));
  const CpSplit split = o.cp_split == "zigzag" ? CpSplit::Zigzag : CpSplit::Contiguous;
  const double peak = o.peak_gflops > 0 ? o.peak_gflops : measure_gemm_gflops();
  out << "data: " << loader.packing().sequences.size() << " sequences of " << o.seq_len
      << " tokens (packing efficiency " << std::fixed << std::setprecision(1)
      << 100 * loader.packing().efficiency() << "%); global batch " << o.batch_size * o.grad_accum * dp
      << " sequences = " << o.batch_size * o.grad_accum * dp * o.seq_len << " tokens"
      << (cp > 1 ? ", each sequence split over " + std::to_string(cp) + " ranks (" + o.cp_split +
                       ", " + o.cp_algo + ")"
                 : std::string())
      << "\npeak for MFU: " << peak << " GFLOP/s per rank ("
      << (o.peak_gflops > 0 ? "--peak-gflops" : "sgemm measured now on rank 0's threads") << ")\n"
      << std::flush;

  TimingTable table;
  for (const ColumnSpec& c : kColumns) table.columns.push_back({c.name, c.unit, c.help, {}, 1});
  for (const ColumnSpec& c : kRankColumns)
    table.columns.push_back({c.name, c.unit, c.help, {}, int64_t(world.size)});
  TrainState state;
  state.data_seed = o.seed;
  const Provenance prov = ctx.provenance();
  PhaseClock clock;
  double last_timing_write = omp_get_wtime(), bytes_before = 0;
  const double run_start = omp_get_wtime();
  // Rank 0 writes; every rank learns the outcome, so a failed write stops all of them.
  auto agreed_write = [&](const std::function<void()>& write) {
    const std::string err = run_agreed(world, [&] {
      if (world.root()) write();
    });
    if (!err.empty()) throw Error(err);
  };

  for (int64_t step = 1; step <= o.steps; ++step) {
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

    // Per-rank figures before the checkpoint (which only rank 0 does).
    const auto& ph = clock.seconds;
    const double comm = ph[size_t(Phase::Comm)], allreduce = ph[size_t(Phase::Allreduce)];
    const double bytes = cp_bytes() + double(reducer.bytes_sent);
    const double mine[5] = {clock.total(), ph[size_t(Phase::AttnFwd)] + ph[size_t(Phase::AttnBwd)],
                            comm, allreduce, bytes - bytes_before};
    bytes_before = bytes;
    std::vector<double> ranks(size_t(5 * world.size));
    MPI_Allgather(mine, 5, MPI_DOUBLE, ranks.data(), 5, MPI_DOUBLE, world.comm);
    double busy_max = 0, busy_sum = 0, comm_frac = 0;
    for (int r = 0; r < world.size; ++r) {
      const double* x = &ranks[size_t(5 * r)];
      const double busy = x[0] - x[2] - x[3];
      busy_max = std::max(busy_max, busy);
      busy_sum += busy;
      comm_frac += x[2] / x[0] / world.size;
    }
    const double imbalance = busy_max / (busy_sum / world.size);
    clock.lap(Phase::Allreduce);

    const bool ckpt = step == o.steps || (o.checkpoint_every > 0 && step % o.checkpoint_every == 0);
    if (ckpt) {
      state.data_epoch = loader.epoch();
      state.data_cursor = loader.cursor();
      agreed_write([&] {
        write_checkpoint(run->checkpoint_path(state.step),
                         {&mc, &model.layout(), model.params(), trainer.optimizer().m(),
                          trainer.optimizer().v(), state},
                         prov);
        run->mark_latest(state.step);
        run->prune(o.keep_checkpoints);
      });
    }
    clock.lap(Phase::IO);

    const double secs = clock.total();
    const Flops f = train_flops(mc, double(o.grad_accum * o.batch_size * o.seq_len), pairs);
    const double gflops = f.total() / double(cp) / secs / 1e9;  // this rank's share
    const double row[] = {double(step), double(state.restarts), st.loss, st.lr, st.grad_norm,
                          double(st.skipped), double(st.real_tokens), double(st.valid_targets), secs,
                          double(st.real_tokens) / secs, gflops, gflops / peak,
                          ph[size_t(Phase::AttnFwd)], ph[size_t(Phase::AttnBwd)], ph[size_t(Phase::Gemm)],
                          ph[size_t(Phase::Other)], ph[size_t(Phase::Optimizer)], ph[size_t(Phase::IO)],
                          comm, ph[size_t(Phase::Allreduce)], comm_frac, imbalance, peak_rss_mib()};
    for (size_t c = 0; c < std::size(kColumns); ++c) table.columns[c].values.push_back(row[c]);
    for (size_t c = 0; c < std::size(kRankColumns); ++c)
      for (int r = 0; r < world.size; ++r)
        table.columns[std::size(kColumns) + c].values.push_back(ranks[size_t(5 * r) + c]);

    if (step % o.log_every == 0 || step == 1 || step == o.steps) {
      const double eta = (omp_get_wtime() - run_start) / double(step) * double(o.steps - step);
      char line[320], par[64] = "";
      if (world.size > 1) std::snprintf(par, sizeof par, "  comm %.1f%%  imb %.2f", 100 * comm_frac, imbalance);
      std::snprintf(line, sizeof line,
                    "step %6lld/%lld  loss %.4f  lr %.2e  |g| %.3f  %.2f s  %.0f tok/s  %.1f GFLOP/s  "
                    "MFU %.1f%%%s  eta %s%s",
                    (long long)step, (long long)o.steps, st.loss, st.lr, st.grad_norm, secs,
                    double(st.real_tokens) / secs, gflops, 100 * gflops / peak, par,
                    duration(eta).c_str(), st.skipped ? "  SKIPPED (non-finite)" : "");
      out << line << std::endl;
    }
    if (ckpt || omp_get_wtime() - last_timing_write > 10) {
      agreed_write([&] { write_timing_file(run->timing_path(), table, prov); });
      last_timing_write = omp_get_wtime();
    }
  }

  // Verification and the figure of merit, as HPC codes end a run.
  const auto& loss = table.column("loss").values;
  const size_t k = std::max<size_t>(1, std::min<size_t>(5, loss.size() / 4));
  double first = 0, last = 0;
  for (size_t i = 0; i < k; ++i) {
    first += loss[i] / double(k);
    last += loss[loss.size() - 1 - i] / double(k);
  }
  const bool falling = std::isfinite(last) && last < first;
  const size_t skip = loss.size() > 1 ? 1 : 0;
  const auto tail = [&](const char* name) {
    const auto& v = table.column(name).values;
    return median(std::vector<double>(v.begin() + long(skip), v.end()));
  };
  const double fom = tail("tokens_per_s");
  table.summary = {{"figure_of_merit_tokens_per_s", fom},
                   {"median_mfu", tail("mfu")},
                   {"median_exposed_comm_frac", tail("exposed_comm_frac")},
                   {"median_imbalance", tail("imbalance")},
                   {"peak_gflops", peak},
                   {"dp", dp},
                   {"cp", cp},
                   {"verification", std::string(falling ? "PASSED" : "FAILED")},
                   {"loss_first", first},
                   {"loss_last", last}};
  agreed_write([&] { write_timing_file(run->timing_path(), table, prov); });
  out << std::setprecision(4) << "verification: loss " << first << " (first " << k << " steps) -> "
      << last << " (last " << k << "): " << (falling ? "falling, PASSED" : "not falling, FAILED") << "\n"
      << std::setprecision(1) << "figure of merit: " << fom << " tokens/s (median over steps"
      << (skip ? " after the first" : "") << "), MFU " << 100 * tail("mfu") << "%";
  if (world.size > 1)
    out << ", exposed communication " << 100 * tail("exposed_comm_frac") << "%, imbalance "
        << std::setprecision(2) << tail("imbalance");
  out << "\n";
  if (world.root()) out << "wrote " << run->timing_path() << " and " << run->latest() << std::endl;
  return kExitOk;
}

}  // namespace lct
