#include "io/arrays.hpp"

#include "common/error.hpp"
#include "io/atomic.hpp"
#include "io/h5.hpp"

namespace lct {

void write_array_file(const std::string& path, const std::vector<NamedArray>& arrays,
                      const std::vector<std::pair<std::string, Value>>& attrs, bool force,
                      const Provenance* prov) {
  AtomicTarget target(path, force, "array file");
  {
    double bytes = 0;
    for (const NamedArray& a : arrays) bytes += 4.0 * double(a.f32.size() + a.i32.size()) + 8.0 * double(a.f64.size());
    h5::File f = h5::File::create(target, bytes, "array file");
    for (const auto& [k, v] : attrs) h5::write_attr(f.h, k, v);
    for (const NamedArray& a : arrays) {
      for (size_t slash = a.name.find('/'); slash != std::string::npos; slash = a.name.find('/', slash + 1))
        if (!h5::exists(f.h, a.name.substr(0, slash))) h5::create_group(f, f.h, a.name.substr(0, slash));
      if (!a.f32.empty()) h5::write_array(f, f.h, a.name, a.f32.data(), a.shape);
      else if (!a.i32.empty()) h5::write_array(f, f.h, a.name, a.i32.data(), a.shape);
      else h5::write_array(f, f.h, a.name, a.f64.data(), a.shape);
      if (!a.attrs.empty()) {
        const h5::Handle d(H5Dopen2(f.h, a.name.c_str(), H5P_DEFAULT), H5Dclose);
        if (!d.valid()) fail(h5::where(f, a.name), ": cannot open the dataset just written");
        for (const auto& [k, v] : a.attrs) h5::write_attr(d, k, v);
      }
    }
    if (prov) h5::write_provenance(f, *prov);
    f.close();
  }
  target.commit();
}

std::vector<double> read_array_f64(const std::string& path, const std::string& name) {
  h5::File f = h5::File::open_read(path, "array file");
  const h5::ArrayInfo info = h5::array_info(f, f.h, name);
  std::vector<double> out(size_t(info.numel()));
  h5::read_array(f, f.h, name, out.data());
  return out;
}

Value read_root_attr(const std::string& path, const std::string& name) {
  h5::File f = h5::File::open_read(path, "array file");
  return h5::read_attr(f.h, name, h5::where(f, ""));
}

}  // namespace lct
