// The timing table of a run: one row per step, one column per quantity, written as a group
// /steps with one dataset per column: [rows] for a value per row, [rows, ranks] for a value
// per rank (per_rank columns; [rows, 1] on one rank, so the layout never depends on the rank
// count). h5py: f["steps/loss"][:], f["steps/rank_seconds"][:, r]. Each column carries `unit`
// and `help` attributes. The whole file is rewritten atomically, so a crash never leaves a
// torn table.
#pragma once
#include <string>
#include <vector>

#include "common/provenance.hpp"

namespace lct {

struct TimingColumn {
  std::string name, unit, help;
  std::vector<double> values;  // [rows * width], row-major
  int64_t width = 1;           // values per row: the rank count of a per_rank column, else 1
  bool per_rank = false;       // a [rows, width] dataset (even when width is 1), else [rows]
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
