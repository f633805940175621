#include "parallel/world.hpp"

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdlib>
#include <climits>
#include <cstdio>
#include <set>
#include <unistd.h>
#include <vector>

#include "common/error.hpp"
#include "common/fault.hpp"
#include "kernels/peak_probe.hpp"
#include "parallel/watchdog.hpp"

namespace lct {

World world_init(int* argc, char*** argv, int wanted) {
  World w;
  // Open MPI 4.1's OMPIO probes its shared-file-pointer components at every MPI_File_open;
  // two of them (lockedfile, sm) sprintf the file name into a fixed buffer and abort the job
  // ("buffer overflow detected") for paths past ~245 characters. lctrain never uses shared
  // file pointers: leave them out, unless the user chose the components. Other MPIs ignore it.
  ::setenv("OMPI_MCA_sharedfp", "^lockedfile,sm", 0);
  MPI_Init_thread(argc, argv, wanted, &w.thread_level);
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &w.node_comm);
  MPI_Comm_rank(w.node_comm, &w.node_rank);
  MPI_Comm_size(w.node_comm, &w.node_size);
  return w;
}

namespace {
// The test hook (common/fault.hpp). A malformed LCT_INJECT_FAULT was reported by the
// subcommand that read it; here, on the way out, it must not throw again.
bool injected_finalize_hang(int rank) {
  try {
    return fault_from_environment().hangs_in_finalize(rank);
  } catch (const Error&) {
    return false;
  }
}
}  // namespace

void world_finalize(World& w, int exit_code, double grace_s) {
  if (w.node_comm != MPI_COMM_NULL) MPI_Comm_free(&w.node_comm);
  std::thread([exit_code, grace_s, rank = w.rank] {
    std::this_thread::sleep_for(std::chrono::duration<double>(grace_s));
    std::fprintf(stderr,
                 "lctrain: rank %d: MPI_Finalize has not returned %.0f s after the run ended (MPICH 4.0 over "
                 "UCX's TCP transport can hang there: docs/mpi.md); its work is written: exiting with its code %d\n",
                 rank, grace_s, exit_code);
    std::fflush(stderr);
    ::_exit(exit_code);
  }).detach();  // a finalize that returns ends the process, and this thread with it
  if (injected_finalize_hang(w.rank))
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  MPI_Finalize();
}

World world_duplicate(const World& w) {
  World d = w;
  MPI_Comm_dup(w.comm, &d.comm);
  return d;
}

void world_free_duplicate(World& w) {
  if (w.comm != MPI_COMM_WORLD && w.comm != MPI_COMM_NULL) MPI_Comm_free(&w.comm);
}

void barrier(MPI_Comm comm, const char* what) {
  WaitScope wait(what);
  MPI_Barrier(comm);
}

NodeShare node_share(const World& w) {
  const std::vector<int> mine = current_cpuset();
  const std::vector<std::vector<int32_t>> sets = allgather_varying(mine, w.node_comm, "the host's CPU sets");
  const std::vector<std::vector<int32_t>> ranks = allgather_varying(std::vector<int32_t>{w.rank}, w.node_comm, "the host's ranks");
  std::set<int> uni;
  std::vector<int> world_ranks;
  for (size_t r = 0; r < sets.size(); ++r) {
    uni.insert(sets[r].begin(), sets[r].end());
    world_ranks.push_back(ranks[r][0]);
  }
  NodeShare s;
  s.ranks_on_node = w.node_size;
  s.rank_on_node = w.node_rank;
  s.node_cpus.assign(uni.begin(), uni.end());
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  const CpuClaim claim = claim_cpus(sets, world_ranks, w.node_rank, host, s.node_cpus, core_ids(s.node_cpus));
  s.given = mine;
  s.claimed = claim.cpus;
  s.divided_among = claim.divided_among;
  return s;
}

std::string run_agreed(const World& w, const std::function<void()>& body) {
  std::string msg;
  try {
    body();
  } catch (const Error& e) {
    msg = e.what();
  } catch (const std::bad_alloc&) {
    msg = "out of memory: reduce the sequence length or micro-batch, or run on more ranks";
  } catch (const std::exception& e) {
    msg = cat("internal error: ", e.what());
  }
  int mine = msg.empty() ? INT_MAX : w.rank, first = INT_MAX;
  WaitScope wait("the other ranks to agree on an outcome");
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, w.comm);
  if (first == INT_MAX) return "";
  int len = int(msg.size());
  MPI_Bcast(&len, 1, MPI_INT, first, w.comm);
  msg.resize(size_t(len));
  MPI_Bcast(msg.data(), len, MPI_CHAR, first, w.comm);
  if (first != 0 && w.size > 1) msg = cat("rank ", first, ": ", msg);
  return msg;
}

void agreed(const World& w, const std::function<void()>& body) {
  const std::string err = run_agreed(w, body);
  if (!err.empty()) throw AgreedError(err);
}

void abort_job(const World& w, const std::string& what) {
  std::fprintf(stderr, "lctrain: error on rank %d alone: %s; aborting every rank\n", w.rank,
               what.c_str());
  std::fflush(stderr);
  // MPICH's hydra tears down its output forwarding as soon as one rank aborts: the line
  // above, still in the pipe to its proxy, was lost in 2 of 3 tries. A moment lets it through.
  usleep(200 * 1000);
  MPI_Abort(MPI_COMM_WORLD, kExitAborted);
  std::_Exit(kExitAborted);
}

namespace {

// Every rank's slowest probe thread, and the slowest of them all into p (the same on every
// rank), with the CPU that thread was pinned to.
void slowest_thread_of_all(const World& w, const Topology& topo, Peak& p) {
  const std::vector<int> cpus = topo.threads_bound ? topo.binding_order() : std::vector<int>{};
  const int t = p.slowest_thread;
  const double cpu = t >= 0 && size_t(t) < cpus.size() ? cpus[size_t(t)] : -1;
  const std::vector<double> all = allgather({p.slowest_thread_rate, double(t), cpu}, w.comm,
                                            "the other ranks' measurement of the peak rate");
  for (int r = 0; r < w.size; ++r) {
    const double* x = &all[size_t(r) * 3];
    if (r == 0 || x[0] < p.slowest_thread_rate) {
      p.slowest_thread_rate = x[0];
      p.slowest_thread = int(x[1]);
      p.slowest_cpu = int(x[2]);
      p.slowest_rank = r;
    }
  }
}

}  // namespace

Peak measure_peak_together(const World& w, const Topology& topo, bool startup) {
  WaitScope wait("the other ranks' measurement of the peak rate");
  MPI_Barrier(w.comm);
  const FaultPlan fault = fault_from_environment();
  Peak p = measure_peak(topo.cpu, topo.isa, topo.threads, [&] { MPI_Barrier(w.comm); },
                        startup ? fault.slowed_thread(w.rank) : -1);
  slowest_thread_of_all(w, topo, p);
  if (startup && fault.lowers_peak(w.rank)) {
    p.fp32 *= kLowPeakFactor;
    p.bf16 *= kLowPeakFactor;
    p.bf16_amx_nominal *= kLowPeakFactor;
  }
  // The slowest rank, as inside a rank the slowest thread sets a window's time: synchronous
  // training runs at that pace, and 1 rank x N threads and N ranks x 1 thread then measure
  // the same machine alike (the fastest rank reads a core's lone-turbo rate: 150 GFLOP/s
  // per core on a 16-core Xeon whose 16 threads together do 81 each).
  double v[3] = {p.fp32, p.bf16, p.bf16_amx_nominal};
  MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_DOUBLE, MPI_MIN, w.comm);
  p.fp32 = v[0];
  p.bf16 = v[1];
  p.bf16_amx_nominal = v[2];
  if (w.size > 1) {
    p.fp32_how += ", slowest rank";
    if (!p.bf16_how.empty()) p.bf16_how += ", slowest rank";
  }
  return p;
}

std::string broadcast_string(std::string s, MPI_Comm comm) {
  WaitScope w("a broadcast from rank 0");
  int n = int(s.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, comm);
  s.resize(size_t(n));
  MPI_Bcast(s.data(), n, MPI_CHAR, 0, comm);
  return s;
}

std::vector<int64_t> broadcast_ints(std::vector<int64_t> v, MPI_Comm comm) {
  WaitScope w("a broadcast from rank 0");
  int n = int(v.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, comm);
  v.resize(size_t(n));
  MPI_Bcast(v.data(), n, MPI_INT64_T, 0, comm);
  return v;
}

std::vector<double> allgather(const std::vector<double>& mine, MPI_Comm comm, const char* what) {
  int ranks = 1;
  MPI_Comm_size(comm, &ranks);
  std::vector<double> all(mine.size() * size_t(ranks));
  WaitScope w(what);
  MPI_Allgather(mine.data(), int(mine.size()), MPI_DOUBLE, all.data(), int(mine.size()), MPI_DOUBLE,
                comm);
  return all;
}

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(text, &len);
  return std::string(text, size_t(len));
}

int comm_rank(MPI_Comm comm) {
  int r;
  MPI_Comm_rank(comm, &r);
  return r;
}

int comm_size(MPI_Comm comm) {
  int n;
  MPI_Comm_size(comm, &n);
  return n;
}

namespace {
template <class T>
std::vector<std::vector<T>> allgather_any(const std::vector<T>& mine, MPI_Datatype type, MPI_Comm comm,
                                          const char* what) {
  const int ranks = comm_size(comm);
  std::vector<int> counts(static_cast<size_t>(ranks)), offsets(static_cast<size_t>(ranks), 0);
  const int n = int(mine.size());
  WaitScope w(what);
  MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, comm);
  for (int r = 1; r < ranks; ++r) offsets[size_t(r)] = offsets[size_t(r - 1)] + counts[size_t(r - 1)];
  std::vector<T> flat(size_t(offsets.back() + counts.back()));
  MPI_Allgatherv(mine.data(), n, type, flat.data(), counts.data(), offsets.data(), type, comm);
  std::vector<std::vector<T>> out(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    out[size_t(r)].assign(flat.begin() + offsets[size_t(r)], flat.begin() + offsets[size_t(r)] + counts[size_t(r)]);
  return out;
}
}  // namespace

std::vector<std::vector<int32_t>> allgather_varying(const std::vector<int32_t>& mine, MPI_Comm comm,
                                                    const char* what) {
  return allgather_any(mine, MPI_INT32_T, comm, what);
}

std::vector<std::vector<double>> allgather_varying(const std::vector<double>& mine, MPI_Comm comm,
                                                   const char* what) {
  return allgather_any(mine, MPI_DOUBLE, comm, what);
}

}  // namespace lct
