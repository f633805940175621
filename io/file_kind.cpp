#include "io/file_kind.hpp"

#include "common/error.hpp"
#include "io/h5.hpp"

namespace lct {

std::string file_kind(const std::string& path) {
  h5::File f = h5::File::open_read(path, "file");
  if (!h5::has_attr(f.h, kFileKindAttr)) return "";
  return h5::read_string(f.h, kFileKindAttr, h5::where(f, ""));
}

namespace h5 {

void write_kind(const File& f, const std::string& kind, int64_t version) {
  write_attr(f.h, kFileKindAttr, kind);
  write_attr(f.h, "format_version", version);
}

void check_kind(const File& f, const std::string& what, std::initializer_list<const char*> accepted,
                int64_t version) {
  const std::string w = where(f, "");
  if (!has_attr(f.h, kFileKindAttr))
    fail(what, " ", w, " was not written by lctrain (no '", kFileKindAttr, "' attribute)");
  const std::string kind = read_string(f.h, kFileKindAttr, w);
  bool ok = false;
  for (const char* a : accepted) ok = ok || kind == a;
  if (!ok) fail(what, " ", w, " is an lctrain ", kind, " file, not a ", what);
  const int64_t v = read_int(f.h, "format_version", w);
  if (v != version)
    fail(what, " ", w, " has format_version ", v, " but this lctrain reads format_version ",
         version, "; convert it or use the lctrain version that wrote it");
}

}  // namespace h5
}  // namespace lct

namespace lct {
std::string hdf5_description() {
#ifdef H5_HAVE_PARALLEL
  return "HDF5 " + h5::library_version() + " (parallel)";
#else
  return "HDF5 " + h5::library_version() + " (serial)";
#endif
}
}  // namespace lct
