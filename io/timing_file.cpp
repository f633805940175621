#include "io/timing_file.hpp"

#include "common/error.hpp"
#include "io/atomic.hpp"
#include "io/h5.hpp"

namespace lct {

constexpr int64_t kTimingFormatVersion = 1;

TimingColumn& TimingTable::column(const std::string& name) {
  for (auto& c : columns)
    if (c.name == name) return c;
  fail("timing table has no column '", name, "'");
}

const TimingColumn* TimingTable::find(const std::string& name) const {
  for (const auto& c : columns)
    if (c.name == name) return &c;
  return nullptr;
}

void write_timing_file(const std::string& path, const TimingTable& t, const Provenance& prov,
                       const std::string& kind) {
  AtomicTarget target(path, true, "timing file");
  {
    double bytes = 0;
    for (const TimingColumn& c : t.columns) bytes += 8.0 * double(c.values.size());
    h5::File f = h5::File::create(target, bytes, "timing file");
    h5::write_kind(f, kind, kTimingFormatVersion);
    for (const auto& [k, v] : t.summary) h5::write_attr(f.h, k, v);
    h5::create_group(f, f.h, "steps");
    std::string order;
    for (const TimingColumn& c : t.columns) {
      const std::string name = "steps/" + c.name;
      if (!c.per_rank && c.width != 1)
        fail("timing column '", c.name, "' has ", c.width, " values per row but is not per rank");
      const int64_t rows = int64_t(c.values.size()) / c.width;
      h5::write_array(f, f.h, name, c.values.data(),
                      c.per_rank ? std::vector<int64_t>{rows, c.width} : std::vector<int64_t>{rows});
      h5::Handle d(H5Dopen2(f.h, name.c_str(), H5P_DEFAULT), H5Dclose);
      h5::write_attr(d, "unit", c.unit);
      h5::write_attr(d, "help", c.help);
      order += (order.empty() ? "" : " ") + c.name;
    }
    h5::Handle g = h5::open_group(f, "steps");
    h5::write_attr(g, "columns", order);
    g.reset();
    h5::write_provenance(f, prov);
    f.close();
  }
  target.commit();
}

TimingTable read_timing_file(const std::string& path) {
  h5::File f = h5::File::open_read(path, "timing file");
  const std::string w = h5::where(f, "");
  h5::check_kind(f, "timing file", {"timing", "bench"}, kTimingFormatVersion);
  TimingTable t;
  h5::Handle g = h5::open_group(f, "steps");
  const std::string order = h5::read_string(g, "columns", h5::where(f, "steps"));
  for (size_t i = 0; i < order.size();) {
    size_t j = order.find(' ', i);
    if (j == std::string::npos) j = order.size();
    TimingColumn c;
    c.name = order.substr(i, j - i);
    const std::string name = "steps/" + c.name;
    const h5::ArrayInfo info = h5::array_info(f, f.h, name);
    c.values.resize(size_t(info.numel()));
    // Tables written before the layout was fixed hold a one-rank run's per-rank columns as
    // [rows]: they read as per_rank = false, width 1 (TrainRecord::continue_from adopts them).
    c.per_rank = info.shape.size() > 1;
    c.width = c.per_rank ? info.shape[1] : 1;
    h5::read_array(f, f.h, name, c.values.data());
    h5::Handle d(H5Dopen2(f.h, name.c_str(), H5P_DEFAULT), H5Dclose);
    c.unit = h5::read_string(d, "unit", h5::where(f, name));
    c.help = h5::read_string(d, "help", h5::where(f, name));
    t.columns.push_back(std::move(c));
    i = j + 1;
  }
  for (const std::string& a : h5::attr_names(f.h))
    if (a != "lctrain_file" && a != "format_version") t.summary.push_back({a, h5::read_attr(f.h, a, w)});
  return t;
}

}  // namespace lct
