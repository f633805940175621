// The /tokenizer group of dataset files (sentencepiece datasets) and checkpoints (every
// one): which tokenizer made the ids, with the SentencePiece model itself, so that the file
// alone can decode them. Format in docs/files.md, "Dataset file" and "Checkpoint".
//   /tokenizer           attributes name, type, vocab_size, bos_token_id, eos_token_id,
//                        pad_token_id, fingerprint
//   /tokenizer/model     uint8 [bytes]: the serialized SentencePiece ModelProto (a .model
//                        file's bytes); absent for the byte tokenizer
#pragma once
#include "data/dataset.hpp"
#include "io/file_tokenizer.hpp"
#include "io/h5.hpp"

namespace lct {

// Collective in a parallel file (every rank passes the same `t`).
void write_tokenizer_group(const h5::File& f, const TokenizerInfo& t);

// The recorded tokenizer, its model loaded once to check it; a TokenizerInfo with no name
// when the file has no /tokenizer group (files from before tokenizers were recorded).
TokenizerInfo read_tokenizer_group(const h5::File& f);

}  // namespace lct
