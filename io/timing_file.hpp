// The timing table of a run: one row per step, one column per quantity, written as a group
// /steps with one 1-D dataset per column (h5py: f["steps/loss"][:]; pandas:
// pd.DataFrame({k: f["steps"][k][:] for k in f["steps"]})). Each column carries a `unit`
// attribute. The whole file is rewritten atomically, so a crash never leaves a torn table.
#pragma once
#include <string>
#include <vector>

#include "common/provenance.hpp"

namespace lct {

struct TimingColumn {
  std::string name, unit, help;
  std::vector<double> values;  // [rows * width], row-major
  int64_t width = 1;           // > 1: one value per rank, a [rows, width] dataset
};

struct TimingTable {
  std::vector<TimingColumn> columns;
  std::vector<std::pair<std::string, Value>> summary;  // root attributes (figure of merit, ...)
  size_t rows() const { return columns.empty() ? 0 : columns[0].values.size() / size_t(columns[0].width); }
  TimingColumn& column(const std::string& name);
  const TimingColumn* find(const std::string& name) const;
};

void write_timing_file(const std::string& path, const TimingTable& t, const Provenance& prov,
                       const std::string& kind = "timing");
TimingTable read_timing_file(const std::string& path);

}  // namespace lct
