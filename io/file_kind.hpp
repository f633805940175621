// Every file lctrain writes says what it is in the root attribute `lctrain_file`.
#pragma once
#include <string>

namespace lct {

inline constexpr const char* kFileKindAttr = "lctrain_file";

// The kind of an lctrain HDF5 file ("model", "dataset", ...); "" for other HDF5 files.
std::string file_kind(const std::string& path);

}  // namespace lct

namespace lct {
// "HDF5 1.10.8 (parallel)" for --version.
std::string hdf5_description();
}  // namespace lct
