#pragma once
#include <string>

namespace lct {
// The whole file as bytes; throws lct::Error naming the file when it cannot be read.
std::string read_text_file(const std::string& path);
}  // namespace lct
