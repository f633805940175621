#include "io/text_files.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.hpp"

namespace lct {

namespace {
std::ifstream open_text_file(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    fail("input file '", path, "' cannot be read: ", std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail("input '", path, "' is a directory; give the files inside it");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("input file '", path, "' cannot be opened: ", std::strerror(errno));
  return in;
}
}  // namespace

void read_text_in_pieces(const std::string& path, size_t piece_bytes,
                         const std::function<void(std::string_view)>& consume) {
  std::ifstream in = open_text_file(path);
  std::string piece(piece_bytes, '\0');
  while (in) {
    in.read(piece.data(), std::streamsize(piece.size()));
    if (in.bad()) fail("input file '", path, "': read error");
    if (in.gcount() > 0) consume(std::string_view(piece.data(), size_t(in.gcount())));
  }
}

std::string read_text_file(const std::string& path) {
  std::ifstream in = open_text_file(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("input file '", path, "': read error");
  return ss.str();
}

}  // namespace lct
