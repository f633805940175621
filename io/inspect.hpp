// `lctrain inspect`: what any lctrain HDF5 file holds, for people.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>

namespace lct {

struct InspectRequest {
  std::string path;
  int64_t seq_len = 0;  // datasets: also report packing at this sequence length (0 = no)
  bool tensors = true;  // models: the per-tensor table
};

void inspect_file(const InspectRequest& req, std::ostream& out);

}  // namespace lct
