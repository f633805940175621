#include "sys/memory.hpp"

#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <unistd.h>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace lct {

double peak_rss_mib() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

double resident_bytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  const bool ok = std::fscanf(f, "%ld %ld", &pages, &resident) == 2;
  std::fclose(f);
  return ok ? double(resident) * double(sysconf(_SC_PAGESIZE)) : 0.0;
}

// HDF5 allocates and frees a buffer for every chunk it writes or reads (4 MiB here). With
// glibc's defaults each came fresh from the kernel (mmap, or a heap trimmed on every free)
// and was page-faulted in again: writing a 262 MiB checkpoint took 3.7 s, 0.6 s with this.
// Buffers of 16 MiB and more still come straight from mmap (and are first touched by their
// threads); at most 16 MiB of freed heap stays resident.
void tune_allocator() {
#if defined(__GLIBC__)
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_") ||
      (tunables && std::strstr(tunables, "glibc.malloc.")))
    return;
  mallopt(M_MMAP_THRESHOLD, 16 << 20);
  mallopt(M_TRIM_THRESHOLD, 16 << 20);
#endif
}


namespace {

double meminfo_available(const std::string& root) {
  std::ifstream in(root + "/proc/meminfo");
  std::string key;
  double kib = 0;
  while (in >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024.0;
    in.ignore(256, '\n');
  }
  return 0;
}

double read_number(const std::string& file) {  // -1 when missing or "max"
  std::ifstream in(file);
  std::string v;
  if (!(in >> v) || v == "max") return -1;
  try {
    return std::stod(v);
  } catch (...) {
    return -1;
  }
}

struct CgroupMount {
  std::string dir, root;  // where it is mounted, and which cgroup path that directory is
  bool v2 = false;
};

// Where the memory controller is mounted: a v1 "cgroup" mount with the memory option, or the
// v2 "cgroup2" one (used when no v1 memory mount exists).
std::vector<CgroupMount> memory_mounts(const std::string& root) {
  std::vector<CgroupMount> v1, v2;
  std::ifstream in(root + "/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string id, parent, dev, root, point, rest;
    f >> id >> parent >> dev >> root >> point;
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string type, source, options;
    tail >> type >> source >> options;
    if (type == "cgroup2") v2.push_back({point, root, true});
    if (type == "cgroup" && ("," + options + ",").find(",memory,") != std::string::npos)
      v1.push_back({point, root, false});
  }
  return v1.empty() ? v2 : v1;
}

// The process's cgroup path for the mount's hierarchy, from /proc/self/cgroup.
std::string cgroup_path(const std::string& root, bool v2) {
  std::ifstream in(root + "/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    // (Appended piece by piece: GCC 12's -Wrestrict misfires on "," + s + ",".)
    std::string controllers = ",";
    controllers.append(line, a + 1, b - a - 1).push_back(',');
    if (v2 ? controllers == ",," : controllers.find(",memory,") != std::string::npos)
      return line.substr(b + 1);
  }
  return "";
}

}  // namespace

MemoryBudget available_memory(const std::string& root) {
  MemoryBudget best{meminfo_available(root), "MemAvailable"};
  for (const CgroupMount& m : memory_mounts(root)) {
    std::string path = cgroup_path(root, m.v2);
    if (path.empty()) continue;
    if (m.root != "/" && path.rfind(m.root, 0) == 0) path = path.substr(m.root.size());
    // From the process's own cgroup up to the mount: a limit may sit on any ancestor.
    for (std::string p = path;; p = p.substr(0, p.find_last_of('/'))) {
      const std::string dir = root + m.dir + (p == "/" ? "" : p);
      const double limit = read_number(dir + (m.v2 ? "/memory.max" : "/memory.limit_in_bytes"));
      const double used = read_number(dir + (m.v2 ? "/memory.current" : "/memory.usage_in_bytes"));
      // v1 reports "no limit" as a huge page-rounded number.
      if (limit > 0 && limit < 1e18 && used >= 0 && (best.bytes <= 0 || limit - used < best.bytes)) {
        char gib[32];
        std::snprintf(gib, sizeof gib, "%.2f GiB", limit / double(1ull << 30));
        best = {std::max(0.0, limit - used), "cgroup " + (p.empty() ? "/" : p) + " limit " + gib};
      }
      if (p.empty() || p == "/") break;
    }
  }
  return best;
}

}  // namespace lct
