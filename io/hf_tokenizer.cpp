#include "io/hf_tokenizer.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "data/sentencepiece.hpp"
#include "data/tokenizer.hpp"
#include "io/text_files.hpp"

namespace lct {

namespace {

using json = nlohmann::ordered_json;

constexpr const char* kByteDescription =
    "lctrain's byte tokenizer: ids 0-255 are the bytes of UTF-8 text, 256 BOS, 257 EOS, 258 PAD; "
    "no Hugging Face tokenizer class has these ids";

json sentencepiece_config(const TokenizerInfo& t) {
  const SentencePieceTokenizer sp(t.model, "the checkpoint's tokenizer");
  return {{"tokenizer_class", "LlamaTokenizer"},
          {"bos_token", sp.piece(t.bos_id)},
          {"eos_token", sp.piece(t.eos_id)},
          {"unk_token", sp.piece(sp.unk_id())},
          // Without a PAD piece lctrain pads with unk (never a target): Hugging Face has none.
          {"pad_token", t.pad_id == sp.unk_id() ? json(nullptr) : json(sp.piece(t.pad_id))},
          {"add_bos_token", true},
          {"add_eos_token", false}};
}

bool exists(const std::string& path) { return std::ifstream(path).good(); }

}  // namespace

HfTokenizerFiles hf_tokenizer_files(const TokenizerInfo& t) {
  HfTokenizerFiles f;
  if (t.name.empty()) return f;
  json config;
  if (t.name == SentencePieceTokenizer::kName) {
    f.files.push_back({"tokenizer.model", t.model});
    config = sentencepiece_config(t);
  } else {
    config = {{"lctrain_tokenizer", t.name}, {"description", kByteDescription}};
  }
  f.files.push_back({"tokenizer_config.json", config.dump(2) + "\n"});
  f.ids = {{"bos_token_id", t.bos_id}, {"eos_token_id", t.eos_id}, {"pad_token_id", t.pad_id}};
  json generation;
  for (const auto& [k, v] : f.ids) generation[k] = v;
  f.files.push_back({"generation_config.json", generation.dump(2) + "\n"});
  return f;
}

TokenizerInfo read_hf_tokenizer(const std::string& dir, int64_t config_bos, int64_t config_eos) {
  TokenizerInfo t;
  const std::string model = dir + "/tokenizer.model", config = dir + "/tokenizer_config.json";
  if (exists(model)) {
    t = SentencePieceTokenizer(read_text_file(model), cat("'", model, "'"),
                               "replace it with the tokenizer.model of this checkpoint").info();
  } else if (exists(config)) {
    const json c = json::parse(read_text_file(config), nullptr, false);
    if (c.is_object() && c.value("lctrain_tokenizer", "") == "byte") t = ByteTokenizer().info();
  }
  if (t.name.empty()) return t;
  if ((config_bos >= 0 && config_bos != t.bos_id) || (config_eos >= 0 && config_eos != t.eos_id))
    fail("'", dir, "/config.json' gives bos_token_id ", config_bos, " and eos_token_id ", config_eos,
         " but the tokenizer beside it has ", t.bos_id, " and ", t.eos_id,
         "; the files belong to different checkpoints: copy or download the directory again");
  return t;
}

}  // namespace lct
