// The tokenizer an lctrain file holds, for code that does not open HDF5 files itself.
#pragma once
#include <optional>
#include <string>

#include "data/dataset.hpp"

namespace lct {

// The tokenizer of the lctrain file at `path` (a dataset, model file or checkpoint: its
// /tokenizer group, io/tokenizer_group.hpp), read by this process alone; nullopt when `path`
// is not an HDF5 file (a SentencePiece .model file, say).
std::optional<TokenizerInfo> read_file_tokenizer(const std::string& path);

}  // namespace lct
