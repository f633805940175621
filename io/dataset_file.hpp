// The dataset file (format in README "Dataset file"): token ids in /tokens, document
// boundaries in /doc_offsets, optional per-token loss weights in /loss_weights, tokenizer
// description as root attributes, and for synthetic passkey data the answer positions in
// /passkey.
#pragma once
#include <memory>
#include <string>

#include "common/provenance.hpp"
#include "data/dataset.hpp"

namespace lct {

// 2: tokens in the smallest unsigned type that holds vocab_size, chunked and compressed.
// 1: int32 tokens, uncompressed; still read.
constexpr int64_t kDatasetFormatVersion = 2;

// Tokens (and loss weights) per chunk; see dataset_file.cpp for why.
constexpr int64_t kDatasetChunkTokens = int64_t(1) << 15;
// A reader's HDF5 chunk cache per array: 64 to 256 chunks (by token width), so that chunks
// shared by neighbouring reads, and the fingerprint's samples, are decompressed once.
constexpr size_t kDatasetCacheBytes = size_t(8) << 20;

void write_dataset_file(const std::string& path, const TokenDataset& ds, const Provenance& prov,
                        bool force);

// Opens a dataset file for reading on demand: attributes, offsets and passkey answers are
// read and validated now (kind, format_version, shapes, offsets); token ranges are read
// when asked for, each checked against the vocabulary, through a chunk cache of
// `cache_bytes` (per array). The file stays open while the source lives.
std::unique_ptr<TokenSource> open_dataset_file(const std::string& path,
                                               size_t cache_bytes = kDatasetCacheBytes);

// The whole file in memory (inspect, tests), validated as above and every token id checked.
TokenDataset read_dataset_file(const std::string& path);

}  // namespace lct
