// Named arrays in a plain HDF5 file: test fixtures, reference results, debug dumps.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/provenance.hpp"

namespace lct {

struct NamedArray {
  std::string name;             // may contain '/' for groups, created as needed
  std::vector<int64_t> shape;
  std::vector<float> f32;       // exactly one of these holds the data
  std::vector<int32_t> i32;
  std::vector<double> f64;
  std::vector<std::pair<std::string, Value>> attrs = {};  // on the dataset (what it holds, units)
};

void write_array_file(const std::string& path, const std::vector<NamedArray>& arrays,
                      const std::vector<std::pair<std::string, Value>>& attrs, bool force,
                      const Provenance* prov = nullptr);
// Any numeric dataset, converted to double; throws naming the file and object if missing.
std::vector<double> read_array_f64(const std::string& path, const std::string& name);
Value read_root_attr(const std::string& path, const std::string& name);

}  // namespace lct
