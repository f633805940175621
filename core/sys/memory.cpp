#include "sys/memory.hpp"

#include <sys/resource.h>

namespace lct {

double peak_rss_mib() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

}  // namespace lct

#include <fstream>
#include <string>

namespace lct {

double available_memory_gib() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (in >> key >> kib) {
    if (key == "MemAvailable:") return kib / (1024.0 * 1024.0);
    in.ignore(256, '\n');
  }
  return 0;
}

}  // namespace lct
