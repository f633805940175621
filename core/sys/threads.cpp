#include "sys/threads.hpp"

#include <cblas.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "common/knobs.hpp"
#include "common/error.hpp"
#include "sys/stop.hpp"

namespace lct {

namespace {

// Binds thread `tid` (0: the calling thread) to `cpus`.
void set_affinity(const std::vector<int>& cpus, int tid = 0) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  for (int c : cpus) CPU_SET(c, &mask);
  sched_setaffinity(tid, sizeof(mask), &mask);
}

}  // namespace

int plan_threads(const Topology& topo, const ThreadRequest& req) {
  const int own = int(topo.cpuset.size());
  const int node = int(topo.share.node_cpus.size());
  const int ranks = topo.share.ranks_on_node;
  const int fair = node / ranks;  // CPUs per rank when ranks share one CPU set
  // Automatic: one thread per physical core (two SMT siblings on one core's FMA units slow
  // a compute-bound kernel down); --threads or OMP_NUM_THREADS may ask for the siblings too.
  const int node_cores = topo.share.node_cores > 0 ? topo.share.node_cores : node;
  const int avail = std::max(1, std::min(topo.cores(), node_cores / ranks));
  const int asked = req.threads > 0 ? req.threads : req.env_threads;
  const int threads = asked > 0 ? asked : avail;
  if (req.allow_oversubscribe) return threads;
  if (fair < 1)
    fail(ranks, " MPI ranks share ", node, " CPUs on host ", topo.host,
         ": that oversubscribes the cores. Start at most ", node,
         " ranks per host, or pass ", knob_name(Knob::Oversubscribe), " (functional tests only)");
  const std::string fix = cat("bind ranks to more cores (mpirun --map-by slot:PE=T, srun --cpus-per-task=T), or pass ",
                              knob_name(Knob::Oversubscribe), " (functional tests only)");
  const char* by = req.threads > 0 ? "" : " (OMP_NUM_THREADS)";
  const std::string whose =
      topo.share.divided_among > 1
          ? cat("this rank's share of CPUs ", cpu_list(topo.share.given), " (which the launcher gave ",
                topo.share.divided_among, " ranks on host ", topo.host, ")")
          : std::string("this rank's cpuset");
  if (threads > own)
    fail(threads, " OpenMP threads requested", by, " but ", whose, " has ", own, " CPU",
         own == 1 ? "" : "s", ": that oversubscribes the cores; use ", knob_name(Knob::Threads), " ", avail,
         " or fewer (0 = automatic), ", fix);
  if (threads * ranks > node)
    fail(threads, " OpenMP threads per rank", by, " x ", ranks, " ranks on host ", topo.host, " = ",
         threads * ranks, " threads on ", node, " CPUs: that oversubscribes the cores; use ",
         knob_name(Knob::Threads), " ", avail, " or fewer (0 = automatic), ", fix);
  return threads;
}

int omp_num_threads_from_env() {
  const char* v = std::getenv("OMP_NUM_THREADS");
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (n < 1 || n > 4096 || (*end != '\0' && *end != ','))
    fail("OMP_NUM_THREADS='", v, "' is not a positive thread count; unset it or give e.g. ",
         "OMP_NUM_THREADS=4 (or use ", knob_name(Knob::Threads), ")");
  return int(n);
}

void apply_thread_plan(Topology& topo, const ThreadRequest& req) {
  const int threads = plan_threads(topo, req);
  omp_set_dynamic(0);
  omp_set_num_threads(threads);
  openblas_set_num_threads(1);
  // The OpenMP build of OpenBLAS implements the call above with omp_set_num_threads(1).
  if (openblas_get_parallel() == 2) omp_set_num_threads(threads);

  // Pin only when every thread gets a CPU of its own and the user has not chosen a binding.
  const bool user_binding = std::getenv("OMP_PROC_BIND") || std::getenv("OMP_PLACES");
  if (topo.share.divided_among > 1) {
    // The launcher gave this rank's CPU set to others too, and lctrain divided it: OpenMP
    // places set by the user would span the whole set, on top of the other ranks' threads.
    if (user_binding)
      fail(topo.share.divided_among, " ranks on host ", topo.host, " were given the same CPUs (",
           cpu_list(topo.share.given), ") and OMP_PLACES/OMP_PROC_BIND bind threads over all of ",
           "them: bind each rank to cores of its own (mpirun --bind-to core, srun --cpu-bind=cores, ",
           "mpiexec -bind-to core), or unset OMP_PLACES and OMP_PROC_BIND so that lctrain divides them");
    // Every thread of the process, the MPI library's and OpenBLAS's idle pool included;
    // threads started from now on (OpenMP's pool) inherit the main thread's mask.
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task"))
      set_affinity(topo.cpuset, std::atoi(task.path().filename().c_str()));
  }
  const bool bind = req.bind && !user_binding && threads <= int(topo.cpuset.size());
  if (bind) {
    const std::vector<int> cpus = topo.binding_order();
#pragma omp parallel num_threads(threads)
    set_affinity({cpus[size_t(omp_get_thread_num())]});
  }
  int seen = 0;
#pragma omp parallel num_threads(threads)
  {
    block_job_signals_in_this_thread();  // a pool started before keep_signals_off_compute_threads
#pragma omp single
    seen = omp_get_num_threads();
  }
  if (seen != threads || openblas_get_num_threads() != 1)
    fail("thread set-up failed: OpenMP runs ", seen, " threads (wanted ", threads,
         "), OpenBLAS ", openblas_get_num_threads(), " (wanted 1); check OMP_* and ",
         "OPENBLAS_* environment variables");
  topo.threads = threads;
  topo.threads_bound = bind;
}

std::string openblas_description() {
  const int p = openblas_get_parallel();
  const char* variant = p == 0 ? "sequential" : p == 1 ? "pthread" : "openmp";
  std::string config = openblas_get_config();
  while (!config.empty() && config.back() == ' ') config.pop_back();
  return cat(config, " (", variant, " build)");
}

int openblas_threads() { return openblas_get_num_threads(); }

}  // namespace lct
