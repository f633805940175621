#include "train/state.hpp"

#include <cstdio>
#include <random>

namespace lct {

std::string new_run_id() {
  std::random_device rd;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%08x%08x", unsigned(rd()), unsigned(rd()));
  return hex;
}

}  // namespace lct
