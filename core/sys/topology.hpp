// The machine as this rank sees it, built once at start-up and passed down: which cores it
// may run on, which NUMA nodes they belong to, how many ranks share the node, and how many
// OpenMP threads it runs. Nothing below app/ queries the machine on its own.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "sys/cpu.hpp"
#include "sys/peak.hpp"

namespace lct {

struct NodeShare {
  int ranks_on_node = 1;        // MPI ranks on this host
  int rank_on_node = 0;
  std::vector<int> node_cpus;   // union of the CPU sets of all ranks on this host
  int node_cores = 0;           // physical cores among node_cpus (0: count the CPUs)
  std::vector<int> given;       // the CPUs the launcher gave this rank
  std::vector<int> claimed;     // the CPUs it runs on (empty: its affinity mask)
  int divided_among = 1;        // ranks that were given this same CPU set and divided it
};

// Which CPUs this rank takes, from the CPU sets the launcher gave every rank on its host
// (rank_cpus[i] is node rank i's, each sorted; world_ranks[i] its rank in the job).
// Launchers differ: Open MPI's mpirun and srun --cpu-bind give each rank cores of its own,
// MPICH's hydra and `--bind-to none` give every rank the whole node. Ranks given disjoint
// sets keep them. Ranks given one identical set divide it by physical core, in contiguous
// runs of core order (so a rank's cores stay on one socket or NUMA node where they can),
// siblings with their core; with more ranks than cores, rank i takes core i mod cores.
// Sets that overlap without being equal are an error naming two such ranks and the fix.
// `core_of` gives each CPU's physical core (core_ids); CPUs absent from it are their own.
struct CpuClaim {
  std::vector<int> cpus;
  int divided_among = 1;
};
CpuClaim claim_cpus(const std::vector<std::vector<int>>& rank_cpus, const std::vector<int>& world_ranks,
                    int me, const std::string& host, const std::vector<int>& cpus,
                    const std::vector<int>& core_of);

struct Topology {
  std::string host;
  int numa_nodes = 1;             // configured NUMA nodes (1 when libnuma is unavailable)
  int cpus_online = 1;
  std::vector<int> cpuset;        // CPUs this rank may run on (sched_getaffinity)
  std::vector<int> cpuset_numa;   // NUMA node of each CPU in cpuset
  std::vector<int> cpuset_core;   // physical core of each CPU in cpuset (SMT siblings share
                                  // one); empty: every CPU its own core
  NodeShare share;
  int threads = 1;                // OpenMP threads of this rank (set by the thread plan)
  bool threads_bound = false;     // each thread pinned to one CPU of the cpuset
  CpuInfo cpu;                    // what the processor executes
  Isa isa = Isa::Generic;         // the kernel path this run uses (set by choose_isa)
  bool isa_forced = false;        // narrower than the CPU's widest, by request
  Peak peak;                      // measured on demand (train, eval, bench); zero until then

  // Reads the host, libnuma and this process's affinity mask.
  static Topology detect(const NodeShare& share);
  std::string describe() const;   // a few lines for the start-up table
  int cores() const;              // distinct physical cores in cpuset
  int smt() const;                // CPUs per core in cpuset (1: no SMT)
  // The order threads are bound in: one CPU of each core first (its lowest), then the
  // siblings, so that T <= cores() threads never share a core.
  std::vector<int> binding_order() const;
};

// The physical core of each CPU, from sysfs topology (package and core id); a CPU whose
// topology cannot be read is its own core. `sysfs` is the cpu directory (tests use a fake).
std::vector<int> core_ids(const std::vector<int>& cpus,
                          const std::string& sysfs = "/sys/devices/system/cpu");
int distinct(const std::vector<int>& ids);

// The kernel path for `request` ("auto" = the widest the CPU runs); throws when the CPU
// cannot run the one asked for. Sets topo.isa and topo.isa_forced.
void choose_isa(Topology& topo, std::optional<Isa> forced);

// This process's affinity mask as a sorted CPU list.
std::vector<int> current_cpuset();

// "0-3,8,10-11"
std::string cpu_list(const std::vector<int>& cpus);

}  // namespace lct
