#include "io/text_files.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.hpp"

namespace lct {

std::string read_text_file(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    fail("input file '", path, "' cannot be read: ", std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail("input '", path, "' is a directory; give the files inside it");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("input file '", path, "' cannot be opened: ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("input file '", path, "': read error");
  return ss.str();
}

}  // namespace lct
