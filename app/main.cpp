// lctrain: parse, start MPI, build the topology once, run one subcommand with every rank
// agreeing on the outcome, exit with the same code everywhere.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>

#include "app/cli/cli.hpp"
#include "app/cli/context.hpp"
#include "common/error.hpp"
#include "common/fault.hpp"
#include "kernels/gemm.hpp"
#include "parallel/world.hpp"
#include "sys/memory.hpp"
#include "sys/stop.hpp"
#include "sys/threads.hpp"

namespace {

// The launcher's rank, known before MPI_Init, so that help and usage errors print once.
int launcher_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
}

// The error line in one write: written in pieces, a launcher's own message about the ranks'
// exit (Open MPI's "----" banner, printed as another rank exits) could land between them.
void print_error(const std::string& error) {
  std::string line = "lctrain: error: " + error;
  if (line.back() != '\n') line += '\n';
  std::fflush(stdout);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

int dispatch(lct::Context& ctx) {
  const std::string& c = ctx.inv.command;
  if (c == "init") return lct::cmd_init(ctx);
  if (c == "prepare") return lct::cmd_prepare(ctx);
  if (c == "inspect") return lct::cmd_inspect(ctx);
  if (c == "train") return lct::cmd_train(ctx);
  if (c == "eval") return lct::cmd_eval(ctx);
  if (c == "bench") return lct::cmd_bench(ctx);
  if (c == "convert") return lct::cmd_convert(ctx);
  if (c == "plan") return lct::cmd_plan(ctx);
  lct::fail("unknown subcommand '", c, "'");
}

}  // namespace

int main(int argc, char** argv) {
  lct::tune_allocator();  // before MPI and HDF5 allocate anything
  const lct::Invocation inv = lct::parse_command_line(argc, argv);
  if (inv.exit_code >= 0) {  // help, --version or a usage error: no MPI needed
    if (launcher_rank() == 0) {
      std::cout << inv.output << std::flush;
      if (!inv.error.empty()) print_error(inv.error);
    }
    return inv.exit_code;
  }

  // train's stop writer (app/training/step_start_save.hpp) writes beside the step's thread.
  lct::World world =
      lct::world_init(&argc, &argv, inv.command == "train" ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED);
  // After MPI_Init (a singleton's forked daemon keeps the signals it was born with), before
  // OpenMP's pool starts (its threads inherit the block).
  lct::keep_signals_off_compute_threads();
  int code = lct::kExitOk;
  // Two agreed phases: every rank has its threads set up before any subcommand starts
  // collectives, so a set-up error on one rank cannot leave the others waiting.
  std::optional<lct::Context> ctx;
  std::string error = lct::run_agreed(world, [&] {
    ctx.emplace(lct::Context{inv, world, lct::Topology::detect(lct::node_share(world))});
    lct::apply_thread_plan(ctx->topo, {inv.global.threads, inv.global.oversubscribe,
                                       inv.global.bind_threads, lct::omp_num_threads_from_env()});
    lct::choose_isa(ctx->topo, inv.global.isa);
    lct::gemm_setup(inv.global.gemm, ctx->topo.isa);
    lct::fault_from_environment();  // a malformed LCT_INJECT_FAULT fails here, before a run directory exists
  });
  if (error.empty()) error = lct::run_agreed(world, [&] { code = dispatch(*ctx); });
  if (!error.empty()) {
    if (world.root()) print_error(error);
    code = lct::kExitError;
  }
  // --comm-timeout bounds a hung MPI_Finalize too, at most a minute: the run is complete there.
  const double timeout = inv.command == "train" ? inv.train.comm_timeout : inv.command == "eval" ? inv.eval.comm_timeout : 0;
  lct::world_finalize(world, code, timeout > 0 ? std::min(timeout, 60.0) : 60.0);
  return code;
}
