#include "sys/topology.hpp"

#include <numa.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>

#include "common/knobs.hpp"
#include "common/error.hpp"

namespace lct {

std::vector<int> current_cpuset() {
  // With OMP_PLACES or OMP_PROC_BIND set (as Slurm job scripts do), libgomp pins the initial
  // thread to the first place when it loads, before main: the affinity mask then shows one
  // core. The places were computed from the rank's mask before that pinning, so their union
  // is the CPU set the rank was given.
  const int places = omp_get_num_places();
  if (places > 0) {
    std::set<int> cpus;
    for (int p = 0; p < places; ++p) {
      std::vector<int> ids(size_t(omp_get_place_num_procs(p)));
      omp_get_place_proc_ids(p, ids.data());
      cpus.insert(ids.begin(), ids.end());
    }
    return {cpus.begin(), cpus.end()};
  }
  cpu_set_t mask;
  CPU_ZERO(&mask);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mask)) cpus.push_back(c);
  return cpus;
}

std::vector<int> core_ids(const std::vector<int>& cpus, const std::string& sysfs) {
  std::vector<int> ids;
  for (int c : cpus) {
    const std::string dir = cat(sysfs, "/cpu", c, "/topology/");
    std::ifstream package(dir + "physical_package_id"), core(dir + "core_id");
    int p = 0, k = 0;
    // Cores are numbered per package: (package, core) names a core; -1 - c when unknown.
    ids.push_back(package >> p && core >> k ? p * 65536 + k : -1 - c);
  }
  return ids;
}

int distinct(const std::vector<int>& ids) { return int(std::set<int>(ids.begin(), ids.end()).size()); }

int Topology::cores() const { return cpuset_core.empty() ? int(cpuset.size()) : distinct(cpuset_core); }

int Topology::smt() const { return std::max(1, int(cpuset.size()) / std::max(1, cores())); }

std::vector<int> Topology::binding_order() const {
  if (cpuset_core.empty()) return cpuset;
  std::vector<int> first, rest;
  std::set<int> seen;
  for (size_t i = 0; i < cpuset.size(); ++i)  // cpuset is sorted: the lowest CPU of a core first
    (seen.insert(cpuset_core[i]).second ? first : rest).push_back(cpuset[i]);
  first.insert(first.end(), rest.begin(), rest.end());
  return first;
}

std::string cpu_list(const std::vector<int>& cpus) {
  std::string s;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    s += cat(s.empty() ? "" : ",", cpus[i]);
    if (j > i) s += cat("-", cpus[j]);
    i = j + 1;
  }
  return s;
}

CpuClaim claim_cpus(const std::vector<std::vector<int>>& rank_cpus, const std::vector<int>& world_ranks,
                    int me, const std::string& host, const std::vector<int>& cpus,
                    const std::vector<int>& core_of) {
  const std::vector<int>& mine = rank_cpus[size_t(me)];
  std::vector<int> group;  // node ranks given exactly my set, in node-rank order
  for (size_t r = 0; r < rank_cpus.size(); ++r) {
    const std::vector<int>& other = rank_cpus[r];
    if (other == mine) {
      group.push_back(int(r));
      continue;
    }
    std::vector<int> common;
    std::set_intersection(mine.begin(), mine.end(), other.begin(), other.end(), std::back_inserter(common));
    if (!common.empty())
      fail("ranks ", world_ranks[size_t(me)], " and ", world_ranks[r], " on host ", host,
           " were given overlapping CPU sets (", cpu_list(mine), " and ", cpu_list(other),
           "): bind each rank to cores of its own (mpirun --bind-to core or --map-by slot:PE=T, ",
           "srun --cpu-bind=cores, mpiexec -bind-to core), or bind none and lctrain divides each ",
           "host's CPUs among its ranks");
  }
  if (group.size() == 1) return {mine, 1};
  // Physical cores of my set in order of their first CPU; each core's CPUs.
  std::vector<int> order;
  std::vector<std::vector<int>> core_cpus;
  for (int c : mine) {
    auto it = std::find(cpus.begin(), cpus.end(), c);
    const int core = it == cpus.end() ? -1 - c : core_of[size_t(it - cpus.begin())];
    auto k = std::find(order.begin(), order.end(), core);
    if (k == order.end()) {
      order.push_back(core);
      core_cpus.push_back({c});
    } else {
      core_cpus[size_t(k - order.begin())].push_back(c);
    }
  }
  const size_t n = core_cpus.size(), ranks = group.size();
  const size_t i = size_t(std::find(group.begin(), group.end(), me) - group.begin());
  // Rank i of k takes cores [i n / k, (i + 1) n / k); with more ranks than cores, core i mod n.
  size_t first = i * n / ranks, last = (i + 1) * n / ranks;
  if (ranks > n) first = i % n, last = first + 1;
  std::vector<int> out;
  for (size_t k = first; k < last; ++k) out.insert(out.end(), core_cpus[k].begin(), core_cpus[k].end());
  std::sort(out.begin(), out.end());
  return {out, int(ranks)};
}

Topology Topology::detect(const NodeShare& share) {
  Topology t;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  t.host = host;
  t.cpus_online = int(sysconf(_SC_NPROCESSORS_ONLN));
  t.cpuset = share.claimed.empty() ? current_cpuset() : share.claimed;
  const bool have_numa = numa_available() >= 0;
  t.numa_nodes = have_numa ? numa_num_configured_nodes() : 1;
  for (int c : t.cpuset) t.cpuset_numa.push_back(have_numa ? std::max(0, numa_node_of_cpu(c)) : 0);
  t.cpuset_core = core_ids(t.cpuset);
  t.share = share;
  if (t.share.node_cpus.empty()) t.share.node_cpus = t.cpuset;
  t.share.node_cores = distinct(core_ids(t.share.node_cpus));
  t.cpu = detect_cpu();
  t.isa = t.cpu.widest();
  return t;
}

void choose_isa(Topology& topo, std::optional<Isa> forced) {
  const Isa widest = topo.cpu.widest();
  const Isa want = forced ? *forced : widest;
  if (!topo.cpu.runs(want))
    fail(knob_name(Knob::Isa), " ", isa_name(want), ": this CPU (", topo.cpu.model_name, ": ", topo.cpu.features(),
         ") cannot run it; its widest kernel path is ", isa_name(widest),
         " (use ", knob_name(Knob::Isa), " auto or a narrower path)");
  topo.isa = want;
  topo.isa_forced = want != widest;
}

std::string Topology::describe() const {
  std::set<int> nodes(cpuset_numa.begin(), cpuset_numa.end());
  std::string numa_list;
  for (int n : nodes) numa_list += cat(numa_list.empty() ? "" : ",", n);
  return cat("host ", host, ": ", cpus_online, " CPUs online, ", numa_nodes, " NUMA node",
             numa_nodes == 1 ? "" : "s", "; ", share.ranks_on_node, " rank",
             share.ranks_on_node == 1 ? "" : "s", " on this host sharing CPUs ",
             cpu_list(share.node_cpus), "\n", "rank cpuset ", cpu_list(cpuset),
             share.divided_among > 1
                 ? cat(", its share of CPUs ", cpu_list(share.given), ", which the launcher gave ",
                       share.divided_among, " ranks,")
                 : "",
             " (NUMA ",
             numa_list, "; ", cores(), " core", cores() == 1 ? "" : "s",
             smt() > 1 ? cat(", SMT: ", smt(), " CPUs per core") : "", "); ", threads,
             " OpenMP thread", threads == 1 ? "" : "s",
             smt() > 1 ? (threads <= cores() ? ", one per core" : ", more than the cores: SMT siblings shared")
                       : "",
             threads_bound                ? ", each bound to one CPU"
             : omp_get_proc_bind() != omp_proc_bind_false ? ", bound by OMP_PROC_BIND/OMP_PLACES"
                                                          : ", unbound",
             "\n", "cpu: ",
             cpu.model_name, " (family ", cpu.family, " model ", cpu.model, "), ",
             cpu.physical_cores, " cores / ", cpu.logical_cpus, " CPUs; ", cpu.features(), "\n",
             "kernels: ", isa_name(isa),
             isa_forced ? cat(" (forced by ", knob_name(Knob::Isa), "; the CPU runs ", isa_name(cpu.widest()), ")") : "");
}

}  // namespace lct
