#include "io/hf_model.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <type_traits>

#include "common/knobs.hpp"
#include "common/error.hpp"
#include "common/finite.hpp"
#include "io/atomic.hpp"
#include "io/hf_tokenizer.hpp"
#include "io/safetensors.hpp"

namespace lct {

namespace {

using json = nlohmann::ordered_json;

// A checkpoint directory's weights: one file, or an index naming its shards.
constexpr const char* kWeightsFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

template <class>
inline constexpr bool kAlwaysFalse = false;

// --- The config mapping -------------------------------------------------------------------
// Every ModelConfig field is a LlamaConfig key of the same name, except the dotted
// rope_scaling.KEY fields (the keys of LlamaConfig's rope_scaling dict). Two tables say where
// the two differ; a field added to ModelConfig::for_each_field flows through both directions
// with nothing else to do unless it needs an entry here (or, for a new C++ type such as a
// dict-valued field, a branch in field_from_json / field_to_json: the static_asserts say so).

// Fields whose Hugging Face null means lctrain's 0 (and 0 is written back as null).
bool null_means_zero(const std::string& name) { return name == "sliding_window"; }

// LlamaConfig's defaults for keys a config.json may leave out (num_key_value_heads: as many as
// num_attention_heads). Any other missing field is refused.
const json& hf_defaults() {
  static const json d = {{"rope_theta", 10000.0}, {"rms_norm_eps", 1e-6}, {"initializer_range", 0.02},
                         {"tie_word_embeddings", false}, {"sliding_window", nullptr}};
  return d;
}

// ModelConfig's dotted fields "rope_scaling.KEY" are the keys of LlamaConfig's rope_scaling
// dict (null = none; its older name for rope_type is "type").
constexpr const char* kRopePrefix = "rope_scaling.";
const char* rope_key(const char* name) {
  const size_t n = std::strlen(kRopePrefix);
  return std::strncmp(name, kRopePrefix, n) == 0 ? name + n : nullptr;
}

template <class T>
void field_from_json(const json& x, T& v, const std::string& where, const char* name) {
  auto wrong = [&](const char* want) {
    fail(where, ": \"", name, "\" is ", x.dump(), " but must be ", want, "; correct config.json");
  };
  if constexpr (std::is_same_v<T, bool>) {
    if (!x.is_boolean()) wrong("true or false");
    v = x.get<bool>();
  } else if constexpr (std::is_same_v<T, int64_t>) {
    if (!x.is_number_integer() || (x.is_number_unsigned() && x.get<uint64_t>() > uint64_t(INT64_MAX)))
      wrong("an integer");
    v = x.get<int64_t>();
  } else if constexpr (std::is_same_v<T, double>) {
    if (!x.is_number()) wrong("a number");
    v = x.get<double>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!x.is_string()) wrong("a string");
    v = x.get<std::string>();
  } else {
    static_assert(kAlwaysFalse<T>, "convert: map this ModelConfig field type from JSON here");
  }
}

template <class T>
json field_to_json(const T& v) {
  if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, int64_t> || std::is_same_v<T, double> ||
                std::is_same_v<T, std::string>)
    return json(v);
  else
    static_assert(kAlwaysFalse<T>, "convert: map this ModelConfig field type to JSON here");
}

ModelConfig config_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) fail(where, " is not a JSON object; give a Hugging Face config.json");
  const std::string llama_only = "lctrain converts Llama checkpoints only (model_type \"llama\", "
                                 "architecture LlamaForCausalLM)";
  if (!j.contains("model_type") || j["model_type"] != "llama")
    fail(where, ": model_type is ", j.contains("model_type") ? j["model_type"].dump() : "missing",
         "; ", llama_only);
  if (j.contains("architectures") && !j["architectures"].is_null()) {
    const json& a = j["architectures"];
    if (!a.is_array() || a.size() != 1 || a[0] != "LlamaForCausalLM")
      fail(where, ": architectures is ", a.dump(), "; ", llama_only);
  }
  if (j.contains("hidden_act") && j["hidden_act"] != "silu")
    fail(where, ": hidden_act is ", j["hidden_act"].dump(), "; lctrain's MLP is SwiGLU (\"silu\") only");
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (j.contains(key) && j[key] != false)
      fail(where, ": ", key, " is ", j[key].dump(), "; lctrain's Llama has no bias terms, so only ",
           "checkpoints without biases convert");
  if (j.contains("attention_dropout") && j["attention_dropout"] != 0 && j["attention_dropout"] != 0.0)
    fail(where, ": attention_dropout is ", j["attention_dropout"].dump(),
         "; lctrain has no dropout: set it to 0.0 to convert");

  const json* rope = j.contains("rope_scaling") && !j["rope_scaling"].is_null() ? &j["rope_scaling"] : nullptr;
  if (rope && !rope->is_object())
    fail(where, ": rope_scaling is ", rope->dump(), " but must be an object or null; correct config.json");
  ModelConfig c;
  ModelConfig::for_each_field(c, [&](const char* name, auto& v) {
    if (const char* key = rope_key(name)) {  // absent, or null inside: the default
      const char* k = std::string(key) == "rope_type" && rope && !rope->contains(key) ? "type" : key;
      if (rope && rope->contains(k) && !(*rope)[k].is_null())
        field_from_json((*rope)[k], v, where, name);
      return;
    }
    const json* x = nullptr;
    if (j.contains(name)) {
      x = &j[name];
    } else if (std::string(name) == "num_key_value_heads") {
      if constexpr (std::is_same_v<std::decay_t<decltype(v)>, int64_t>)
        v = c.num_attention_heads;  // LlamaConfig: None = multi-head attention
      return;
    } else if (hf_defaults().contains(name)) {
      x = &hf_defaults()[name];
    } else {
      fail(where, " lacks \"", name, "\", which lctrain needs (LlamaConfig has no default for it ",
           "that lctrain assumes); add it");
    }
    if (x->is_null()) {
      if (!null_means_zero(name)) fail(where, ": \"", name, "\" is null; give its value");
      v = {};
      return;
    }
    field_from_json(*x, v, where, name);
  });
  if (j.contains("head_dim") && !j["head_dim"].is_null() &&
      (!j["head_dim"].is_number_integer() || j["head_dim"].get<int64_t>() * c.num_attention_heads != c.hidden_size))
    fail(where, ": head_dim is ", j["head_dim"].dump(), " but lctrain's head_dim is hidden_size / ",
         "num_attention_heads = ", c.hidden_size, " / ", c.num_attention_heads,
         "; only checkpoints with head_dim = hidden_size / num_attention_heads convert");
  c.validate(where);
  return c;
}

json config_to_json(const ModelConfig& c, bool bf16) {
  json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  json defaults;  // every field's default, as JSON
  const ModelConfig plain;
  ModelConfig::for_each_field(plain, [&](const char* name, const auto& d) { defaults[name] = field_to_json(d); });
  j["rope_scaling"] = nullptr;
  ModelConfig::for_each_field(c, [&](const char* name, const auto& v) {
    using T = std::decay_t<decltype(v)>;
    if (const char* key = rope_key(name)) {
      // Only the type, the factor and what differs from the defaults (what the type reads:
      // init refuses the rest), as Hugging Face writes it.
      const json x = field_to_json(v);
      const std::string k = key;
      if (!c.rope_scaling.none() && (k == "rope_type" || k == "factor" || x != defaults[name]))
        j["rope_scaling"][key] = x;
      return;
    }
    if constexpr (std::is_arithmetic_v<T>)
      if (null_means_zero(name) && v == T{}) return void(j[name] = nullptr);
    j[name] = field_to_json(v);
  });
  j["head_dim"] = c.head_dim();
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["pretraining_tp"] = 1;
  j["torch_dtype"] = bf16 ? "bfloat16" : "float32";
  return j;
}

// --- Files --------------------------------------------------------------------------------

bool is_file(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// is_file, but a symbolic link that leads nowhere (dangling, or a loop) is an error naming
// its target, not an absent file: a Hugging Face cache snapshot is links into ../../blobs,
// and a copy without the blobs must not be reported as a directory lacking the file.
bool is_file_or_broken_link(const std::string& p) {
  struct stat st;
  if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return is_file(p);
  if (::stat(p.c_str(), &st) == 0) return S_ISREG(st.st_mode);
  const int err = errno;
  char target[PATH_MAX + 1];
  const ssize_t n = ::readlink(p.c_str(), target, PATH_MAX);
  const std::string to = n >= 0 ? std::string(target, size_t(n)) : std::string("?");
  if (err == ELOOP)
    fail("'", p, "' is a symbolic link to '", to, "' that loops (links lead back to themselves); replace ",
         "it with the file itself (copy a Hugging Face cache snapshot with cp -rL), or download the checkpoint again");
  fail("'", p, "' is a symbolic link to '", to, "', which does not exist (", std::strerror(err),
       "; a Hugging Face cache snapshot copied without its blobs?); copy the files the links point to ",
       "(cp -rL SNAPSHOT DIR), or download the checkpoint again");
}

json read_json(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) fail("'", path, "' cannot be opened: ", std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    fail("'", path, "' is not valid JSON (", e.what(), "); it should be ", what);
  }
}

std::string join(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

// convert --to-hf writes its two files by two renames; one random id in both (a key of
// config.json, the safetensors metadata) lets a reader tell a pair from a mixture that a
// convert killed between the renames leaves behind. Files written elsewhere carry none.
constexpr const char* kPairKey = "lctrain_pair";

std::string new_pair_id() {
  std::random_device rd;
  char id[24];
  std::snprintf(id, sizeof id, "%08x%08x", unsigned(rd()), unsigned(rd()));
  return id;
}

void check_same_pair(const json& cfg, const std::string& cfg_path, const StFile& weights) {
  const auto it = weights.metadata.find(kPairKey);
  if (it == weights.metadata.end()) return;
  const std::string theirs = cfg.contains(kPairKey) && cfg[kPairKey].is_string() ? cfg[kPairKey].get<std::string>() : "";
  if (theirs == it->second) return;
  fail("'", cfg_path, "' and '", weights.path, "' are not one pair (", kPairKey, " ",
       theirs.empty() ? "absent" : theirs, " vs ", it->second, "): a convert ", knob_name(Knob::ToHf), " into this directory ",
       "was stopped between writing its two files; run that convert again (", knob_name(Knob::Force), " replaces both)");
}

struct Located {
  const StFile* file;
  const StTensor* tensor;
};

// The checkpoint's safetensors headers: model.safetensors, or the shards that
// model.safetensors.index.json names (index_map: tensor -> shard, filled for an index only).
std::vector<StFile> read_hf_headers(const std::string& dir, std::map<std::string, std::string>& index_map) {
  std::vector<StFile> files;
  const std::string single = join(dir, kWeightsFile), index = join(dir, kIndexFile);
  if (is_file_or_broken_link(single)) {
    files.push_back(read_safetensors_header(single));
    return files;
  }
  if (!is_file_or_broken_link(index))
    fail("'", dir, "' has neither model.safetensors nor model.safetensors.index.json",
         is_file(join(dir, "pytorch_model.bin")) || is_file(join(dir, "pytorch_model.bin.index.json"))
             ? " (it holds PyTorch .bin weights, which lctrain does not read)" : "",
         "; save the checkpoint as safetensors (save_pretrained(DIR, safe_serialization=True))");
  const json ix = read_json(index, "a safetensors index ({\"weight_map\": {tensor: file}})");
  if (!ix.is_object() || !ix.contains("weight_map") || !ix["weight_map"].is_object())
    fail("'", index, "' has no \"weight_map\" object naming the file of every tensor; copy or download it again");
  std::vector<std::string> shards;
  for (const auto& [name, file] : ix["weight_map"].items()) {
    if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
      fail("'", index, "': tensor '", name, "' is mapped to ", file.dump(),
           ", not to a file name in the same directory; copy or download the index again");
    const std::string shard = file.get<std::string>();
    index_map[name] = shard;
    if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
  }
  for (const std::string& s : shards) {
    const std::string p = join(dir, s);
    if (!is_file_or_broken_link(p))
      fail("'", index, "' names shard '", s, "' but '", p, "' does not exist; copy or download every shard");
    files.push_back(read_safetensors_header(p));
  }
  return files;
}

// Where each of the model's tensors is. Tensors Hugging Face derives on loading (rotary
// inv_freq, a tied lm_head) are counted in report.ignored; any other tensor, a tensor in two
// files, or one the index places in a file without it is an error.
std::map<std::string, Located> locate_tensors(const std::string& dir, const std::vector<StFile>& files,
                                              const std::map<std::string, std::string>& index_map,
                                              const ModelData& m, HfReadInfo& report) {
  std::map<std::string, Located> where;
  for (const StFile& f : files) {
    report.files.push_back(f.path);
    for (const StTensor& t : f.tensors) {
      const std::string name = t.name;
      if (!index_map.empty()) {
        auto it = index_map.find(name);
        if (it == index_map.end() || join(dir, it->second) != f.path) continue;  // the index decides
      }
      if (m.layout.find(name)) {
        if (where.count(name))
          fail("tensor '", name, "' is in both '", where[name].file->path, "' and '", f.path,
               "'; remove one copy");
        where[name] = {&f, &t};
        continue;
      }
      const bool inv_freq = name.size() > 20 && name.rfind("rotary_emb.inv_freq") == name.size() - 19;
      if (inv_freq || (name == "lm_head.weight" && m.config.tie_word_embeddings)) {
        ++report.ignored;  // derived from rope_theta / tied to the embedding, as Hugging Face loads it
        continue;
      }
      if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0)
        fail("'", f.path, "': tensor '", name, "' is a bias; lctrain's Llama has no bias terms, so only ",
             "checkpoints without biases convert");
      fail("'", f.path, "': tensor '", name, "' is not part of a Llama model with this config.json (",
           "num_hidden_layers ", m.config.num_hidden_layers, ", tie_word_embeddings ",
           m.config.tie_word_embeddings ? "true" : "false", "); check that config.json belongs to these weights");
    }
  }
  for (const auto& [name, shard] : index_map)
    if (m.layout.find(name) && !where.count(name))
      fail("'", join(dir, kIndexFile), "' puts tensor '", name, "' in '", shard,
           "' but that file has no such tensor; copy or download the checkpoint again");
  return where;
}

// Every tensor of m's layout into m.params, each checked for its shape and finite values.
void read_tensors(const std::string& dir, const std::vector<StFile>& files,
                  const std::map<std::string, Located>& where, ModelData& m, HfReadInfo& report) {
  m.params = Buffer<float>(m.layout.total);
  for (const TensorSpec& spec : m.layout.tensors) {
    auto it = where.find(spec.name);
    if (it == where.end())
      fail("'", dir, "': tensor '", spec.name, "' is missing from ",
           files.size() == 1 ? cat("'", files[0].path, "'") : std::string("every shard"),
           " (config.json: ", "num_hidden_layers ", m.config.num_hidden_layers, ", tie_word_embeddings ",
           m.config.tie_word_embeddings ? "true" : "false", "); check that config.json belongs to these weights");
    const StTensor& t = *it->second.tensor;
    if (t.shape != spec.shape) {
      std::string have, want;
      for (int64_t s : t.shape) have += cat(have.empty() ? "" : ", ", s);
      for (int64_t s : spec.shape) want += cat(want.empty() ? "" : ", ", s);
      fail("'", it->second.file->path, "': tensor '", spec.name, "' has shape [", have, "] but config.json (hidden_size ",
           m.config.hidden_size, ", intermediate_size ", m.config.intermediate_size, ", heads ",
           m.config.num_attention_heads, "/", m.config.num_key_value_heads, ", vocab_size ",
           m.config.vocab_size, ") needs [", want, "]; check that config.json belongs to these weights");
    }
    float* out = m.params.data() + spec.offset;
    read_safetensors_tensor(*it->second.file, t, out);
    const NonFinite bad = count_non_finite(out, spec.numel);
    if (bad.total())
      fail("'", it->second.file->path, "': tensor '", spec.name, "' holds ", describe(bad),
           "; lctrain refuses non-finite weights (training would skip every step)");
    ++report.dtypes[t.dtype];
  }
}

}  // namespace

ModelData read_hf_model(const std::string& dir, HfReadInfo* info) {
  const std::string takes = cat(knob_name(Knob::FromHf), " takes a Hugging Face checkpoint directory (config.json and ",
                                kWeightsFile, ", or ", kIndexFile, " and its shards)");
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) fail("'", dir, "' is not a directory; ", takes);
  const std::string cfg_path = join(dir, "config.json");
  if (!is_file_or_broken_link(cfg_path)) fail("'", dir, "' has no config.json; ", takes);
  ModelData m;
  const json cfg = read_json(cfg_path, "a Hugging Face LlamaConfig");
  m.config = config_from_json(cfg, cat("'", cfg_path, "'"));
  m.layout = ParamLayout::llama(m.config);

  std::map<std::string, std::string> index_map;  // tensor -> shard, sharded checkpoints only
  const std::vector<StFile> files = read_hf_headers(dir, index_map);
  if (files.size() == 1) check_same_pair(cfg, cfg_path, files[0]);
  HfReadInfo local;
  HfReadInfo& report = info ? *info : local;
  const std::map<std::string, Located> where = locate_tensors(dir, files, index_map, m, report);
  read_tensors(dir, files, where, m, report);
  auto id = [&](const char* key) { return cfg.contains(key) && cfg[key].is_number_integer() ? cfg[key].get<int64_t>() : -1; };
  m.tokenizer = read_hf_tokenizer(dir, id("bos_token_id"), id("eos_token_id"));
  return m;
}

namespace {
// `contents` into `temp` (AtomicTarget's temporary of `final_path`), checked.
void write_text(const std::string& temp, const std::string& final_path, const std::string& contents) {
  std::ofstream out(temp, std::ios::binary);
  out << contents;
  out.close();
  if (!out) fail("'", final_path, "': writing failed; free some space, or write the directory elsewhere");
}
}  // namespace

std::string json_library_version() {
  return cat("nlohmann-json ", NLOHMANN_JSON_VERSION_MAJOR, ".", NLOHMANN_JSON_VERSION_MINOR, ".",
             NLOHMANN_JSON_VERSION_PATCH);
}

void write_hf_model(const std::string& dir, const ModelConfig& config, const ParamLayout& layout,
                    const float* params, bool bf16, const TokenizerInfo& tokenizer, const Provenance& prov,
                    bool force) {
  if (dir.empty()) fail(knob_name(Knob::ToHf), ": the directory name is empty; give a directory");
  struct stat st;
  bool created = false;
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) fail(knob_name(Knob::ToHf), " '", dir, "' exists and is not a directory; give a directory");
    if (is_file(join(dir, kIndexFile)))
      fail(knob_name(Knob::ToHf), " '", dir, "' holds a sharded checkpoint (model.safetensors.index.json) that a ",
           "single model.safetensors beside it would contradict; choose another directory");
  } else {
    std::string d = dir;
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    check_can_write(d, false, knob_name(Knob::ToHf) + " directory");
    if (::mkdir(dir.c_str(), 0777) != 0)
      fail(knob_name(Knob::ToHf), " '", dir, "' cannot be created: ", std::strerror(errno));
    created = true;
  }
  try {
    AtomicTarget weights(join(dir, kWeightsFile), force, "safetensors file");
    AtomicTarget cfg(join(dir, "config.json"), force, "config file");
    const HfTokenizerFiles tok = hf_tokenizer_files(tokenizer);
    std::vector<std::unique_ptr<AtomicTarget>> tok_files;
    for (const auto& [name, contents] : tok.files) {
      tok_files.push_back(std::make_unique<AtomicTarget>(join(dir, name), force, "tokenizer file"));
      write_text(tok_files.back()->temp_path(), tok_files.back()->final_path(), contents);
    }
    std::vector<StOutTensor> tensors;
    for (const TensorSpec& t : layout.tensors) tensors.push_back({t.name, t.shape, params + t.offset});
    check_free_space(weights.final_path(), safetensors_data_bytes(tensors, bf16), "safetensors file");
    const std::string pair = new_pair_id();
    const std::map<std::string, std::string> meta = {
        {"format", "pt"}, {kPairKey, pair}, {"lctrain_version", prov.version}, {"lctrain_git_revision", prov.git_revision},
        {"lctrain_date", prov.date}, {"lctrain_host", prov.host}, {"lctrain_command_line", prov.command_line}};
    write_safetensors(weights.temp_path(), weights.final_path(), tensors, bf16, meta);
    {
      std::ofstream out(cfg.temp_path());
      json j = config_to_json(config, bf16);
      for (const auto& [key, value] : tok.ids) j[key] = value;
      j[kPairKey] = pair;
      out << j.dump(2) << "\n";
      out.close();
      if (!out) fail("'", cfg.final_path(), "': writing failed; free some space, or write the directory elsewhere");
    }
    // The weights first: a stop between the two leaves new weights beside an old config.json,
    // which check_same_pair refuses (the old one carries another id, or none).
    weights.commit();
    cfg.commit();
    for (const auto& t : tok_files) t->commit();
  } catch (...) {
    if (created) ::rmdir(dir.c_str());  // only when empty: nothing was committed
    throw;
  }
}

}  // namespace lct
