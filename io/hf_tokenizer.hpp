// Hugging Face's tokenizer files beside a checkpoint's weights: what convert --to-hf writes
// for the tokenizer a checkpoint was trained with, and what --from-hf reads back.
//   tokenizer.model         a SentencePiece model's bytes (LlamaTokenizer reads it)
//   tokenizer_config.json   its class and special pieces; for lctrain's byte tokenizer, a
//                           description (no Hugging Face class has its ids)
//   generation_config.json  bos, eos and pad ids (also written into config.json)
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset.hpp"

namespace lct {

struct HfTokenizerFiles {
  std::vector<std::pair<std::string, std::string>> files;  // name in the directory, contents
  std::vector<std::pair<std::string, int32_t>> ids;        // bos_token_id, eos_token_id, pad_token_id
};
// Nothing for a tokenizer that is not recorded (a model file from init).
HfTokenizerFiles hf_tokenizer_files(const TokenizerInfo& t);

// The tokenizer of a Hugging Face directory: its tokenizer.model, or lctrain's byte tokenizer
// when tokenizer_config.json describes it; no name when there is neither (Llama 3's
// tokenizer.json, say, which lctrain does not read). config.json's bos/eos ids, when given,
// must be the tokenizer's.
TokenizerInfo read_hf_tokenizer(const std::string& dir, int64_t config_bos, int64_t config_eos);

}  // namespace lct
