// Text checks and the separator prepare cuts text files into documents with
// (data/text_stream.hpp does the cutting and encoding).
#pragma once
#include <string>
#include <string_view>

namespace lct {

// Offset of the first byte that breaks UTF-8 (overlong forms, surrogates and code points
// above U+10FFFF included), or npos when the text is valid.
size_t first_invalid_utf8(std::string_view text);

// "\n", "\t", "\\" in a separator given on the command line become the characters.
std::string unescape(const std::string& s);

}  // namespace lct
