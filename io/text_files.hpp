#pragma once
#include <functional>
#include <string>
#include <string_view>

namespace lct {
// The whole file as bytes; throws lct::Error naming the file when it cannot be read.
std::string read_text_file(const std::string& path);
// The file in pieces of at most `piece_bytes`, each handed to `consume` in order: never the
// whole file in memory. Throws like read_text_file.
void read_text_in_pieces(const std::string& path, size_t piece_bytes,
                         const std::function<void(std::string_view piece)>& consume);
}  // namespace lct
