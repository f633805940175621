// The dataset file (format in README "Dataset file"): token ids in /tokens, document
// boundaries in /doc_offsets, tokenizer description as root attributes, and for synthetic
// passkey data the answer positions in /passkey.
#pragma once
#include <string>

#include "common/provenance.hpp"
#include "data/dataset.hpp"

namespace lct {

constexpr int64_t kDatasetFormatVersion = 1;

void write_dataset_file(const std::string& path, const TokenDataset& ds, const Provenance& prov,
                        bool force);

// Validates kind, format_version, attributes, shapes, offsets, and that every token id is
// inside the declared vocabulary.
TokenDataset read_dataset_file(const std::string& path);

}  // namespace lct
