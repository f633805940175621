// Steal time: how long the hypervisor of a virtual machine ran other work while this guest's
// CPUs had work to do (the 8th value of each cpuN line of /proc/stat). On a VM whose vCPUs
// share host cores with others, a step waits for threads whose vCPU is not running; the
// timing table records it per rank so that a slow step can be told from a slow kernel.
#pragma once
#include <vector>

namespace lct {

// Seconds stolen from `cpus` since boot, summed over them; NaN where the kernel reports no
// steal time (bare metal reports 0) or a CPU is missing. `stat`: the file to read (tests).
double stolen_seconds(const std::vector<int>& cpus, const char* stat = "/proc/stat");

}  // namespace lct
