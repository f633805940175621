// How OpenMP threads, OpenBLAS threads and MPI ranks share the cores.
//
// Policy: all parallelism inside a rank is ours (OpenMP). OpenBLAS always runs one thread:
// lctrain calls it from inside its own parallel regions on per-thread tiles, and Debian's
// default (pthread) OpenBLAS would otherwise start its own pool on top of ours. A rank runs
// one OpenMP thread per physical core of its own: min(cores in its cpuset, node cores /
// ranks on the node), SMT siblings left idle (bound one per core). Asking for more than its
// CPUs, or starting more ranks than a host has CPUs, is an error unless oversubscription is
// allowed explicitly (useful only for functional tests).
#pragma once
#include <string>

#include "sys/topology.hpp"

namespace lct {

struct ThreadRequest {
  int threads = 0;                  // --threads; 0 = OMP_NUM_THREADS if set, else automatic
  bool allow_oversubscribe = false;
  bool bind = true;                 // pin thread i to binding_order()[i] when each gets a CPU
  int env_threads = 0;              // OMP_NUM_THREADS (its first level), 0 when unset
};

// OMP_NUM_THREADS as the OpenMP convention reads it ("8" or "8,2": the outer level), 0 when
// unset; anything else is an error naming the variable.
int omp_num_threads_from_env();

// Pure decision, testable: returns the thread count or throws lct::Error with the fix.
int plan_threads(const Topology& topo, const ThreadRequest& req);

// Applies the plan: sets OpenMP's thread count, OpenBLAS to 1 thread (restoring OpenMP's
// count when the OpenMP variant of OpenBLAS shrinks it), binds threads, and verifies the
// result. Updates topo.threads and topo.threads_bound.
void apply_thread_plan(Topology& topo, const ThreadRequest& req);

// OpenBLAS as linked at run time: "OpenBLAS 0.3.21 ... (pthread)".
std::string openblas_description();
int openblas_threads();

}  // namespace lct
