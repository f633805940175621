#include "app/training/train_setup.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <limits.h>
#include <unistd.h>

#include <ostream>

#include "app/cli/progress.hpp"
#include "common/error.hpp"
#include "io/atomic.hpp"
#include "model/activation_offload.hpp"
#include "parallel/layout_model.hpp"
#include "parallel/zero/zero_variant.hpp"
#include "sys/memory.hpp"

namespace lct {

std::string gib(double bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GiB", bytes / double(1u << 30));
  return s;
}

// Everything that can be checked before any rank allocates or writes anything.
void check_inputs(const TrainOptions& o, const ParallelPlan& plan, const ModelConfig& mc,
                  const DatasetInfo& ds, const SeqLenSchedule& schedule) {
  check_fits_model(ds, o.data, mc.vocab_size, o.model);
  if (o.seq_len < 2) fail("--seq-len ", o.seq_len, " is too short: it must be at least 2");
  if (o.batch_size < 1 || o.grad_accum < 1 || o.steps < 1)
    fail("--batch-size, --grad-accum and --steps must be at least 1");
  if (o.block_q < 1 || o.block_k < 1) fail("--block-q and --block-k must be at least 1");
  if (o.keep_checkpoints < 2)
    fail("--keep-checkpoints ", o.keep_checkpoints, " must be at least 2, so that a damaged ",
         "newest checkpoint always leaves a complete one to resume from");
  if (o.keep_every < 0 || o.max_skips < 1 || o.comm_timeout < 0 || o.time_limit < 0)
    fail("--keep-every, --comm-timeout and --time-limit must be >= 0 and --max-skips >= 1");
  plan.check(mc, o.precision);
  // Token indices and positions are 32-bit: a micro-batch holds at most 2^31 - 1 tokens.
  if (o.batch_size > INT32_MAX / o.seq_len)
    fail("--batch-size ", o.batch_size, " x --seq-len ", o.seq_len, " is more tokens than one ",
         "micro-batch can hold (2^31 - 1); use a smaller --batch-size, and --grad-accum for ",
         "larger steps");
  // Every stage of a --seq-len-schedule is cut as --seq-len is.
  for (const SeqLenStage& st : schedule.stages())
    plan.check(st.seq_len, o.batch_size, st.seq_len == o.seq_len ? "--seq-len" : "--seq-len-schedule length");
  // --force moves the previous run's checkpoints aside before the model is read again for
  // its moments (--init-moments), and the new run would record a path that no longer exists.
  if (o.force && o.resume == "none") {
    namespace fs = std::filesystem;
    const std::string model = fs::weakly_canonical(o.model).string(),
                      dir = fs::weakly_canonical(o.run_dir).string() + "/checkpoints/";
    if (model.rfind(dir, 0) == 0)
      fail("--model '", o.model, "' is a checkpoint of --run-dir '", o.run_dir, "', which --force ",
           "sets aside: start the new run in another --run-dir (or copy the checkpoint out first)");
  }
  if (o.resume != "none" && o.resume != "auto" && !std::filesystem::exists(o.resume))
    fail("--resume checkpoint '", o.resume, "' does not exist; give a checkpoint file, or auto");
  // The longest name lctrain writes in the run directory, as the absolute path MPI-IO opens,
  // must stay under the system's limit, or the first checkpoint dies inside MPI-IO or HDF5.
  const size_t longest = RunDirectory::longest_name(o.run_dir);
  if (longest >= PATH_MAX)
    fail("--run-dir '", o.run_dir.size() > 60 ? o.run_dir.substr(0, 60) + "..." : o.run_dir,
         "' is too long: the files lctrain writes in it ",
         "(a checkpoint's temporary, one set aside by --force) would have absolute names of ", longest,
         " characters, past the system's limit of ", PATH_MAX - 1, ": choose a shorter path");
}

void check_memory(std::ostream& out, const TrainOptions& o, const ParallelPlan& plan,
                  const ModelConfig& mc, const ModelShape& shape, const TierSpec& optimizer_tier, int threads,
                  int node_size, int world_size, double process_bytes) {
  Layout l;  // the node split does not change memory: the world as one node
  l.process_bytes = process_bytes;
  l.ranks_per_node = world_size;
  l.threads = threads;
  l.plan = plan;
  l.plan.dp = world_size / (plan.cp * plan.tp);
  l.seq_len = o.seq_len;
  l.micro_batch = o.batch_size;
  l.grad_accum = o.grad_accum;
  l.optimizer_offloaded = optimizer_tier.on();
  const RankMemory mem = estimate_rank_memory(mc, shape, l);
  const double need = mem.total();
  const MemoryBudget budget = available_memory();
  // What this rank took since it started (the model file's weights) is in the estimate and
  // no longer in the budget: it counts as available to the rank.
  const double held = std::max(0.0, resident_bytes() - process_bytes);
  const double avail = budget.bytes / double(node_size) + held;
  out << "memory estimate per rank (" << precision_name(o.precision) << "): " << gib(need) << " = parameters+gradients"
      << (shape.precision == Precision::Bf16 ? "+bf16 copy " : " ") << gib(mem.params_grads)
      << (zero_variant(plan.zero, l.replicas()).weights ? cat(" (1/", l.replicas(), " of them + gathered units: --zero ", plan.zero, ")") : "")
      << (plan.tp > 1 ? cat(" (1/", plan.tp, " of them: --tp ", plan.tp, ")") : "")
      << (mem.master_offloaded > 0 ? cat(" (the fp32 master's ", gib(mem.master_offloaded), " on ", optimizer_tier.describe(), ")") : "")
      << ", AdamW " << gib(mem.optimizer) << (l.ranks_sharing_state() > 1 ? cat(" (1/", l.ranks_sharing_state(), " of it: --zero ", plan.zero, ")") : "")
      << (l.optimizer_offloaded
              ? cat(" streaming through the update (", gib(mem.optimizer_offloaded), " on ", optimizer_tier.describe(), ")")
              : "")
      << ", activations " << gib(mem.activations) << " (checkpointing " << to_string(o.checkpointing) << ", "
      << shape.max_tokens << " tokens per rank" << (shape.mlp_tiled() ? cat(", MLP in tiles of ", shape.mlp_tile) : "")
      << (mem.offloaded > 0 ? cat("; ", gib(mem.offloaded), " more on ", shape.offload_activations.describe()) : "")
      << (shape.offload_layers > 0 && mem.offloaded > 0 ? cat(", the first ", shape.offload_layers, " layers'") : "")
      << (shape.offload_activations.on() && mem.offloaded == 0 && shape.offload_layers < 0
              ? cat("; --offload-activations moves nothing: a model of ", mc.num_hidden_layers, " layers keeps the last ",
                    ActivationOffload::kSlots, " in memory")
              : "")
      << "), micro-batches " << gib(mem.batches) << ", scratch "
      << gib(mem.scratch) << ", at start-up " << gib(mem.transient) << ", the process "
      << gib(mem.process) << "; " << gib(avail) << " available per rank (" << budget.source
      << (node_size > 1 ? cat(" / ", node_size, " ranks") : "") << (held >= 0.01 * (1 << 30) ? cat(", plus the ", gib(held), " this rank already holds") : "") << ")\n";
  if (avail > 0 && need > 0.95 * avail)
    fail("this run needs about ", gib(need), " per rank but ", gib(avail), " are available (",
         budget.source, "); use --checkpointing full, --offload-activations or --offload-optimizer DIR ",
         "(a local disk), a shorter --seq-len, a smaller --batch-size or --grad-accum, a larger --cp, or ask ",
         "the job for more memory");
}

bool continues_run(const RunDirectory& run, const TrainOptions& o) {
  return o.resume == "auto" || (o.resume != "none" && run.holds_checkpoint(o.resume));
}

void check_previous_run(const RunDirectory& run, const TrainOptions& o) {
  if (o.force || continues_run(run, o) || !run.has_previous_run()) return;
  fail("run directory '", o.run_dir, "' holds a previous run (timing.h5 or checkpoints); ",
       "pass --resume auto to continue it, --force to start over in it (its files are moved ",
       "into replaced-DATE-TIME/ there), or choose another --run-dir");
}

std::unique_ptr<RunDirectory> open_run_directory(const World& w, const TrainOptions& o,
                                                 const std::string& host, std::ostream& out,
                                                 double checkpoint_bytes) {
  std::unique_ptr<RunDirectory> run;
  agreed(w, [&] {
    if (!w.root()) return;
    run = std::make_unique<RunDirectory>(o.run_dir);
    run->lock(cat("lctrain train, pid ", ::getpid(), " on host ", host, ", ", w.size,
                  " rank(s), started ", local_time()));
    run->remove_stale_temporaries();  // safe now: no other run writes here
    check_previous_run(*run, o);
    if (!continues_run(*run, o) && run->has_previous_run())  // --force
      out << "--force: the previous run's files were moved to '" << run->set_aside_previous_run()
          << "'\n";
    check_free_space(run->checkpoint_path(0), checkpoint_bytes, "a checkpoint in", run_dir_space_advice());
  });
  return run;
}

std::string latest_or_none(const RunDirectory* run) {
  const std::string p = run ? run->latest() : "";
  return p.empty() ? "none written yet" : "'" + p + "'";
}

}  // namespace lct
