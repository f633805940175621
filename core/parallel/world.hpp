// The MPI world: start-up, the per-host communicator, and error agreement. Communication
// code lives in core/parallel/ only; kernels and the model never include MPI.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/error.hpp"

#include "sys/topology.hpp"

namespace lct {

struct World {
  int rank = 0, size = 1;
  int node_rank = 0, node_size = 1;     // within this host (MPI_COMM_TYPE_SHARED)
  MPI_Comm comm = MPI_COMM_WORLD;
  MPI_Comm node_comm = MPI_COMM_NULL;
  int thread_level = 0;                 // what MPI_Init_thread granted
  bool root() const { return rank == 0; }
};

// MPI_Init_thread asking for `wanted` (MPI_THREAD_FUNNELED by default). Works without
// mpirun (singleton).
World world_init(int* argc, char*** argv, int wanted = MPI_THREAD_FUNNELED);
// MPI_Finalize, guarded: MPICH 4.0 over UCX's TCP transport can hang in it once the run is
// done and written (each rank flushes its endpoints before a PMI barrier, and a TCP flush waits
// for a peer already in the barrier; fixed in MPICH 4.2). If it has not returned after
// `grace_s`, the process says so and exits with `exit_code`: nothing is left to lose, and the
// job does not sit to its time limit.
void world_finalize(World& w, int exit_code, double grace_s);

// `w` over a duplicate of its communicator (collective): for a thread whose collectives run
// beside the caller's (MPI_THREAD_MULTIPLE). world_free_duplicate frees it.
World world_duplicate(const World& w);
void world_free_duplicate(World& w);
// MPI_Barrier, watched as `what`.
void barrier(MPI_Comm comm, const char* what);

// This host's ranks and the union of their CPU sets (an allgather on the host).
NodeShare node_share(const World& w);

// Runs `body` on every rank. If it throws on any rank, every rank returns the message of
// the lowest failing rank (empty string on success): one agreed outcome, no rank left
// waiting. `body` must not itself block in a collective a failing rank skips.
std::string run_agreed(const World& w, const std::function<void()>& body);

// An error every rank has agreed on (thrown on all of them at the same point).
struct AgreedError : Error {
  using Error::Error;
};
// run_agreed, throwing AgreedError on every rank when `body` failed on any.
void agreed(const World& w, const std::function<void()>& body);

// For a failure on this rank alone, where the others may be inside a collective call:
// prints it (with the rank) and aborts every rank of the job with kExitAborted.
[[noreturn]] void abort_job(const World& w, const std::string& what);

// Every rank measures its peak at the same moment (all cores loaded, as in training); each
// figure is the slowest rank's: a lone core's turbo would otherwise set every rank's peak.
// `startup`: the run's first probe, which the test hook lowpeak (common/fault.hpp) lowers.
Peak measure_peak_together(const World& w, const Topology& topo, bool startup);

int comm_rank(MPI_Comm comm);
int comm_size(MPI_Comm comm);
// The MPI library's own description (MPI_Get_library_version: callable before MPI_Init).
std::string mpi_library_version();

// Rank 0's value on every rank of `comm`.
std::string broadcast_string(std::string s, MPI_Comm comm);
std::vector<int64_t> broadcast_ints(std::vector<int64_t> v, MPI_Comm comm);
// Every rank's `mine` (the same length everywhere), rank after rank: [ranks * mine.size()].
// `what` names the call for the watchdog.
std::vector<double> allgather(const std::vector<double>& mine, MPI_Comm comm, const char* what);
// Every rank's `mine`, of any length: [rank][...].
std::vector<std::vector<int32_t>> allgather_varying(const std::vector<int32_t>& mine, MPI_Comm comm,
                                                    const char* what);
std::vector<std::vector<double>> allgather_varying(const std::vector<double>& mine, MPI_Comm comm,
                                                   const char* what);

}  // namespace lct
