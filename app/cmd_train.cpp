// lctrain train: load, check, train, and record every step.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>

#include "app/context.hpp"
#include "common/error.hpp"
#include "io/checkpoint.hpp"
#include "io/dataset_file.hpp"
#include "io/model_file.hpp"
#include "io/run_dir.hpp"
#include "io/timing_file.hpp"
#include "kernels/gemm.hpp"
#include "model/flops.hpp"
#include "train/data_loader.hpp"
#include "train/trainer.hpp"

namespace lct {

namespace {

struct ColumnSpec {
  const char* name;
  const char* unit;
  const char* help;
};

const ColumnSpec kColumns[] = {
    {"step", "", "optimizer step, 1-based"},
    {"restart", "", "times the run had been resumed when this step ran"},
    {"loss", "nats", "mean cross-entropy over the step's valid targets"},
    {"lr", "", "learning rate of the update"},
    {"grad_norm", "", "global gradient L2 norm before clipping"},
    {"skipped", "", "1 when the update was skipped (loss or gradient not finite)"},
    {"tokens", "tokens", "real (non-padding) tokens of the step"},
    {"valid_targets", "tokens", "scored targets of the step"},
    {"seconds", "s", "wall time of the step"},
    {"tokens_per_s", "tokens/s", "tokens / seconds"},
    {"gflops", "GFLOP/s", "model FLOPs (recomputation excluded) / seconds"},
    {"mfu", "", "gflops / peak_gflops"},
    {"attn_fwd_s", "s", "flash attention forward (recomputations included)"},
    {"attn_bwd_s", "s", "flash attention backward"},
    {"gemm_s", "s", "linear layers and LM head"},
    {"other_s", "s", "norms, RoPE, SwiGLU, embedding, data"},
    {"optimizer_s", "s", "gradient norm, clipping, AdamW"},
    {"io_s", "s", "checkpoint written at this step"},
    {"comm_s", "s", "communication (multi-rank runs)"},
    {"peak_rss_mib", "MiB", "process high-water resident memory"},
};

TimingTable new_table() {
  TimingTable t;
  for (const ColumnSpec& c : kColumns) t.columns.push_back({c.name, c.unit, c.help, {}});
  return t;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::string gib(size_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GiB", double(bytes) / double(1u << 30));
  return s;
}

std::string duration(double s) {
  char out[32];
  if (s < 120) std::snprintf(out, sizeof out, "%.0fs", s);
  else if (s < 7200) std::snprintf(out, sizeof out, "%.0fm%02.0fs", std::floor(s / 60), std::fmod(s, 60));
  else std::snprintf(out, sizeof out, "%.0fh%02.0fm", std::floor(s / 3600), std::fmod(s / 60, 60));
  return out;
}

void check_inputs(const TrainOptions& o, const ModelConfig& mc, const TokenDataset& ds) {
  if (ds.vocab_size > mc.vocab_size)
    fail("dataset '", o.data, "' uses a vocabulary of ", ds.vocab_size, " ids but model '", o.model,
         "' has vocab_size ", mc.vocab_size, "; prepare the data with the model's tokenizer or "
         "init a model with --vocab-size ", ds.vocab_size);
  if (o.seq_len < 2) fail("--seq-len ", o.seq_len, " is too short: it must be at least 2");
  if (o.batch_size < 1 || o.grad_accum < 1 || o.steps < 1)
    fail("--batch-size, --grad-accum and --steps must be at least 1");
  if (o.block_q < 1 || o.block_k < 1) fail("--block-q and --block-k must be at least 1");
  const int64_t real = int64_t(ds.tokens.size());
  if (real < o.seq_len)
    fail("dataset '", o.data, "' holds ", real, " tokens, fewer than one sequence of --seq-len ",
         o.seq_len, "; use a shorter --seq-len or more data");
}

}  // namespace

int cmd_train(Context& ctx) {
  const TrainOptions& o = ctx.inv.train;
  if (ctx.world.size > 1)
    fail("train runs on one rank in this version (started on ", ctx.world.size,
         "); run it without mpirun, or with -n 1");
  std::ostream& out = ctx.out();
  ctx.print_startup("train", true);

  ModelData init = read_model_file(o.model);
  const TokenDataset ds = read_dataset_file(o.data);
  check_inputs(o, init.config, ds);

  const ModelConfig& mc = init.config;
  const ModelShape shape{o.batch_size * o.seq_len, o.seq_len, parse_checkpointing(o.checkpointing),
                         {o.block_q, o.block_k}};
  const ModelMemory mem = LlamaModel::memory(mc, shape, ctx.topo.threads);
  const double avail = available_memory_gib();
  out << "model: " << init.layout.num_parameters() << " parameters, " << mc.num_hidden_layers
      << " layers, hidden " << mc.hidden_size << ", heads " << mc.num_attention_heads << "/"
      << mc.num_key_value_heads << " x " << mc.head_dim() << "\n"
      << "memory estimate: " << gib(mem.total()) << " = parameters+gradients " << gib(mem.params_grads)
      << ", AdamW " << gib(mem.optimizer) << ", activations " << gib(mem.activations)
      << " (checkpointing " << o.checkpointing << "), scratch " << gib(mem.scratch) << "; "
      << std::fixed << std::setprecision(1) << avail << " GiB available\n";
  if (avail > 0 && double(mem.total()) / double(1u << 30) > 0.95 * avail)
    fail("this run needs about ", gib(mem.total()), " but ", gib(size_t(avail * double(1u << 30))),
         " are available; use ",
         "--checkpointing full, a shorter --seq-len or a smaller --batch-size");
  if (o.dry_run) {
    out << "dry run: every check passed; nothing allocated or written" << std::endl;
    return kExitOk;
  }
  // Every check passed: only now touch the disk.
  RunDirectory run(o.run_dir);
  if (run.has_previous_run() && !o.force)
    fail("run directory '", o.run_dir, "' holds a previous run (timing.h5 or checkpoints); ",
         "pass --force to start over in it, or choose another --run-dir");
  if (o.seq_len > mc.max_position_embeddings)
    out << "warning: --seq-len " << o.seq_len << " exceeds the model's max_position_embeddings "
        << mc.max_position_embeddings << "\n";

  LlamaModel model(mc, shape);
  std::copy(init.params.data(), init.params.data() + init.layout.total, model.params());
  init.params = Buffer<float>();
  AdamWConfig ac{o.lr, o.min_lr, o.warmup_steps, o.steps, o.beta1, o.beta2, o.eps, o.weight_decay,
                 o.decay_norms_embeddings, o.grad_clip};
  Trainer trainer(model, ac);
  DataLoader loader(ds, o.seq_len, uint64_t(o.seed));
  const double peak = o.peak_gflops > 0 ? o.peak_gflops : measure_gemm_gflops();
  out << "data: " << loader.packing().sequences.size() << " sequences of " << o.seq_len
      << " tokens (packing efficiency " << std::setprecision(1) << 100 * loader.packing().efficiency()
      << "%); global batch " << o.batch_size * o.grad_accum << " sequences = "
      << o.batch_size * o.grad_accum * o.seq_len << " tokens\n"
      << "peak for MFU: " << std::setprecision(1) << peak << " GFLOP/s ("
      << (o.peak_gflops > 0 ? "--peak-gflops" : "sgemm measured now on these threads") << ")\n"
      << std::flush;

  TimingTable table = new_table();
  TrainState state;
  state.data_seed = o.seed;
  const Provenance prov = ctx.provenance();
  PhaseClock clock;
  double last_timing_write = omp_get_wtime();
  const double run_start = omp_get_wtime();
  auto save_checkpoint = [&] {
    state.data_epoch = loader.epoch();
    state.data_cursor = loader.cursor();
    write_checkpoint(run.checkpoint_path(state.step),
                     {&mc, &model.layout(), model.params(), trainer.optimizer().m(),
                      trainer.optimizer().v(), state},
                     prov);
    run.mark_latest(state.step);
    run.prune(o.keep_checkpoints);
  };

  for (int64_t step = 1; step <= o.steps; ++step) {
    clock.reset();
    std::vector<Batch> micro;
    double pairs = 0;
    for (int64_t a = 0; a < o.grad_accum; ++a) {
      micro.push_back(loader.next(o.batch_size));
      pairs += visible_pairs(micro.back());
    }
    clock.lap(Phase::Other);
    const StepStats st = trainer.train_step(micro, step, clock);
    state.step = step;
    state.tokens_seen += st.real_tokens;
    const bool ckpt = step == o.steps || (o.checkpoint_every > 0 && step % o.checkpoint_every == 0);
    if (ckpt) save_checkpoint();
    clock.lap(Phase::IO);

    const double secs = clock.total();
    const Flops f = train_flops(mc, double(o.grad_accum * o.batch_size * o.seq_len), pairs);
    const double gflops = f.total() / secs / 1e9;
    const auto& ph = clock.seconds;
    const double row[] = {double(step), double(state.restarts), st.loss, st.lr, st.grad_norm,
                          double(st.skipped), double(st.real_tokens), double(st.valid_targets), secs,
                          double(st.real_tokens) / secs, gflops, gflops / peak,
                          ph[size_t(Phase::AttnFwd)], ph[size_t(Phase::AttnBwd)], ph[size_t(Phase::Gemm)],
                          ph[size_t(Phase::Other)], ph[size_t(Phase::Optimizer)], ph[size_t(Phase::IO)],
                          ph[size_t(Phase::Comm)], peak_rss_mib()};
    for (size_t c = 0; c < table.columns.size(); ++c) table.columns[c].values.push_back(row[c]);

    if (step % o.log_every == 0 || step == 1 || step == o.steps) {
      const double eta = (omp_get_wtime() - run_start) / double(step) * double(o.steps - step);
      char line[256];
      std::snprintf(line, sizeof line,
                    "step %6lld/%lld  loss %.4f  lr %.2e  |g| %.3f  %.2f s  %.0f tok/s  %.1f GFLOP/s  "
                    "MFU %.1f%%  eta %s%s",
                    (long long)step, (long long)o.steps, st.loss, st.lr, st.grad_norm, secs,
                    double(st.real_tokens) / secs, gflops, 100 * gflops / peak, duration(eta).c_str(),
                    st.skipped ? "  SKIPPED (non-finite)" : "");
      out << line << std::endl;
    }
    if (ckpt || step == o.steps || omp_get_wtime() - last_timing_write > 10) {
      write_timing_file(run.timing_path(), table, prov);
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
  std::vector<double> tps(table.column("tokens_per_s").values.begin() + (loss.size() > 1 ? 1 : 0),
                          table.column("tokens_per_s").values.end());
  std::vector<double> mfu(table.column("mfu").values.begin() + (loss.size() > 1 ? 1 : 0),
                          table.column("mfu").values.end());
  const double fom = median(tps);
  table.summary = {{"figure_of_merit_tokens_per_s", fom},
                   {"median_mfu", median(mfu)},
                   {"peak_gflops", peak},
                   {"verification", std::string(falling ? "PASSED" : "FAILED")},
                   {"loss_first", first},
                   {"loss_last", last}};
  write_timing_file(run.timing_path(), table, prov);
  out << std::setprecision(4) << "verification: loss " << first << " (first " << k << " steps) -> "
      << last << " (last " << k << "): " << (falling ? "falling, PASSED" : "not falling, FAILED") << "\n"
      << std::setprecision(1) << "figure of merit: " << fom << " tokens/s (median over steps"
      << (loss.size() > 1 ? " after the first" : "") << "), MFU " << 100 * median(mfu) << "%\n"
      << "wrote " << run.timing_path() << " and " << run.latest() << std::endl;
  return kExitOk;
}

}  // namespace lct
