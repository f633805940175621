#include "sys/steal.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

namespace lct {

double stolen_seconds(const std::vector<int>& cpus, const char* stat) {
  std::ifstream f(stat);
  const long ticks_per_s = sysconf(_SC_CLK_TCK);
  if (!f || ticks_per_s <= 0) return std::nan("");
  double ticks = 0;
  size_t found = 0;
  for (std::string line; std::getline(f, line);) {
    // "cpu3 user nice system idle iowait irq softirq steal guest guest_nice"
    if (line.compare(0, 3, "cpu") != 0 || line.size() < 4 || line[3] < '0' || line[3] > '9') continue;
    std::istringstream in(line.substr(3));
    int cpu = -1;
    double v[8];
    if (!(in >> cpu >> v[0] >> v[1] >> v[2] >> v[3] >> v[4] >> v[5] >> v[6] >> v[7])) continue;
    if (std::find(cpus.begin(), cpus.end(), cpu) == cpus.end()) continue;
    ticks += v[7];
    ++found;
  }
  return found == cpus.size() && found > 0 ? ticks / double(ticks_per_s) : std::nan("");
}

}  // namespace lct
