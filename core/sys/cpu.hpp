// What the processor can execute (CPUID, and the OS's saved-register mask so that a CPU
// whose kernel does not save AVX-512 state is not taken for an AVX-512 one), its physical
// cores, and the kernel paths lctrain has for it. Built once into the Topology.
#pragma once
#include <string>
#include <vector>

#include "sys/isa.hpp"

namespace lct {

const char* isa_name(Isa isa);          // "avx512_bf16"
Isa parse_isa(const std::string& name); // throws with the list of names

struct CpuInfo {
  std::string vendor, model_name;  // "AuthenticAMD", "AMD EPYC 9R45 ..."
  int family = 0, model = 0;
  bool fma = false, avx2 = false;
  bool avx512 = false;        // F, BW, VL and DQ, with the OS saving the zmm/opmask state
  bool avx512_bf16 = false;
  bool amx_bf16 = false;      // AMX-BF16 in CPUID, the OS saving tile state, and the kernel
                              // granting this process the tile data (arch_prctl)
  int logical_cpus = 0;       // online
  int physical_cores = 0;     // distinct (package, core) pairs among the online CPUs

  Isa widest() const;         // the widest kernel path this CPU runs
  bool runs(Isa isa) const { return int(isa) <= int(widest()); }
  std::string features() const;  // "AVX2 FMA AVX-512 AVX512_BF16 (no AMX)"
};

CpuInfo detect_cpu();

// Physical cores among `cpus` (CPU numbers): distinct (package, core) pairs read from sysfs;
// each CPU counts as its own core where sysfs does not say.
int physical_cores_of(const std::vector<int>& cpus);

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; empty on a malformed list.
std::vector<int> parse_cpu_list(const std::string& list);

}  // namespace lct
