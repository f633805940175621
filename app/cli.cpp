// The one place where options are declared. Precedence: command line > config file >
// environment (LCT_<OPTION> for global options, LCT_<SUBCOMMAND>_<OPTION> for a subcommand's)
// > default, as CLI11 applies them.
#include "app/cli.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "common/error.hpp"
#include "data/sentencepiece.hpp"
#include "model/config.hpp"

namespace lct {

namespace {

// A config file that says one thing twice: which line, and what.
struct ConfigRepeat : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// TOML keys may use snake_case (seq_len) as well as the option's own dashed name. A section
// given twice, or one key given twice in a section (in either spelling), is refused: CLI11
// would silently keep one of them.
class TomlConfig : public CLI::ConfigTOML {
 public:
  std::vector<CLI::ConfigItem> from_config(std::istream& in) const override {
    std::stringstream text;
    text << in.rdbuf();
    refuse_repeats(text.str());
    auto items = CLI::ConfigTOML::from_config(text);
    for (auto& item : items) std::replace(item.name.begin(), item.name.end(), '_', '-');
    return items;
  }

 private:
  static void refuse_repeats(const std::string& text) {
    std::istringstream lines(text);
    std::string line, section;
    std::map<std::string, int> sections, keys;  // name -> line first seen
    for (int n = 1; std::getline(lines, line); ++n) {
      const size_t a = line.find_first_not_of(" \t");
      if (a == std::string::npos || line[a] == '#') continue;
      const size_t b = line.find_last_not_of(" \t\r");
      const std::string t = line.substr(a, b - a + 1);
      if (t.front() == '[') {
        section = t;
        if (auto [it, fresh] = sections.emplace(section, n); !fresh)
          throw ConfigRepeat(cat("line ", n, ": section ", section, " is given again (first on line ",
                                 it->second, "); merge them"));
        continue;
      }
      const size_t eq = t.find('=');
      if (eq == std::string::npos) continue;
      std::string key = t.substr(0, t.find_last_not_of(" \t", eq - 1) + 1);
      std::replace(key.begin(), key.end(), '_', '-');
      if (auto [it, fresh] = keys.emplace(section + key, n); !fresh)
        throw ConfigRepeat(cat("line ", n, ": '", key, "' is given again", section.empty() ? "" : " in ",
                               section, " (first on line ", it->second, ", perhaps spelt with ",
                               "'_' or '-'); keep one"));
    }
  }
};

// CLI11 marks a negating flag with the value it sets ("--tensors,--no-tensors{false}"), which
// reads as the default whatever the default is; show the names alone and the real default:
// "--tensors,--no-tensors (default true)".
class Help : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool positional) const override {
    std::string names = CLI::Formatter::make_option_name(opt, positional);
    if (!has_flag_default(opt)) return names;
    for (size_t a; (a = names.find('{')) != std::string::npos;) names.erase(a, names.find('}', a) + 1 - a);
    return names;
  }
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (!has_flag_default(opt)) return CLI::Formatter::make_option_opts(opt);
    const std::string env = opt->get_envname();
    return " (default " + opt->get_default_str() + ")" + (env.empty() ? "" : " (Env:" + env + ")");
  }

 private:
  // Registry::add gives every boolean flag its default string (--help and --version have none).
  static bool has_flag_default(const CLI::Option* opt) {
    return opt->get_expected_max() == 0 && !opt->get_default_str().empty();
  }
};

// The rule for a number, checked on the text as given, so that NaN, an empty TOML value or an
// integer past 64 bits is refused instead of read as 0 or saturated; the rule shows in --help.
CLI::Validator number(bool integer, double lo, bool lo_open, double hi = HUGE_VAL,
                      bool hi_open = false) {
  auto show = [](double v) { return std::isinf(v) ? std::string(v > 0 ? "inf" : "-inf") : CLI::detail::to_string(v); };
  const std::string rule = hi == HUGE_VAL ? cat(lo_open ? "> " : ">= ", show(lo))
                                          : cat("in ", lo_open ? "(" : "[", show(lo), ", ", show(hi),
                                                hi_open ? ")" : "]");
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double v = integer ? double(std::strtoll(s.c_str(), &end, 10)) : std::strtod(s.c_str(), &end);
        if (s.empty() || *end != '\0' || errno == ERANGE || std::isnan(v))
          return cat("'", s, "' is not ", integer ? "an integer" : "a number", " ", rule);
        if ((lo_open ? v <= lo : v < lo) || (hi_open ? v >= hi : v > hi))
          return cat(s, " is not ", rule);
        return "";
      },
      rule);
}
CLI::Validator count(int64_t lo) { return number(true, double(lo), false); }      // integers >= lo
CLI::Validator nonnegative() { return number(false, 0, false); }
CLI::Validator positive() { return number(false, 0, true); }
CLI::Validator fraction() { return number(false, 0, false, 1, true); }           // [0, 1)

// Where a subcommand writes (`what`: "file" or "directory"). An empty path (`-o ""`, an unset
// shell variable) names nothing: refused here, instead of failing at the final rename.
CLI::Validator output_path(const std::string& what) {
  return CLI::Validator(
      [what](std::string& s) -> std::string {
        return s.empty() ? cat("an empty path names no ", what, "; give the ", what, " to write") : "";
      },
      "");
}

template <class T>
Value to_value(const T& v) {
  if constexpr (std::is_same_v<T, bool>) return v;
  else if constexpr (std::is_integral_v<T>) return int64_t(v);
  else if constexpr (std::is_floating_point_v<T>) return double(v);
  else if constexpr (std::is_same_v<T, std::string>) return v;
  else {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
    return s;
  }
}

// Records every declared option so its resolved value can be listed after parsing.
class Registry {
 public:
  // `name` is the long option ("--seq-len") or a positional ("inputs").
  template <class T>
  CLI::Option* add(CLI::App* app, const std::string& name, T& var, T def, const std::string& help,
                   const std::string& short_name = "") {
    var = std::move(def);
    const std::string key = key_of(name);
    std::string names = name;
    if (!short_name.empty()) names += "," + short_name;
    CLI::Option* opt;
    if constexpr (std::is_same_v<T, bool>) {
      opt = app->add_flag(names + ",!--no-" + name.substr(2), var, help)
                ->default_str(var ? "true" : "false");  // for Help only: flags never show it
    } else {
      opt = app->add_option(names, var, help)->capture_default_str();
    }
    if (name.rfind("--", 0) == 0) opt->envname(env_of(app, key));
    items_.push_back({app, [app, key, help, &var] {
                        return Setting{app->get_parent() ? app->get_name() : "", key,
                                       to_value(var), help};
                      }});
    return opt;
  }
  std::vector<Setting> resolved(const std::vector<const CLI::App*>& apps) const {
    std::vector<Setting> out;
    for (const CLI::App* a : apps)
      for (const auto& [app, get] : items_)
        if (app == a) out.push_back(get());
    return out;
  }

 private:
  static std::string key_of(const std::string& name) {
    std::string k = name.substr(name.find_first_not_of('-'));
    std::replace(k.begin(), k.end(), '-', '_');
    return k;
  }
  // LCT_THREADS for a global option, LCT_TRAIN_SEQ_LEN for train's --seq-len: one variable
  // feeds one subcommand, as a [train] key of a config file does (a shared LCT_SEQ_LEN set
  // train's, eval's, prepare's, inspect's and bench's at once, and a shared LCT_OUT or
  // LCT_FORCE every writer's).
  static std::string env_of(const CLI::App* app, const std::string& key) {
    std::string e = "LCT_" + (app->get_parent() ? app->get_name() + "_" : "") + key;
    std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::toupper(c); });
    return e;
  }
  std::vector<std::pair<const CLI::App*, std::function<Setting()>>> items_;
};

void declare_global(Registry& r, CLI::App& app, GlobalOptions& o) {
  r.add(&app, "--threads", o.threads, 0,
        "OpenMP threads per rank; 0 = the CPUs this rank owns (cpuset / ranks on the host)")
      ->check(count(0));
  r.add(&app, "--oversubscribe", o.oversubscribe, false,
        "allow more threads x ranks than CPUs (functional tests only: it ruins speed)");
  r.add(&app, "--bind-threads", o.bind_threads, true,
        "pin OpenMP thread i to the i-th CPU of the rank's cpuset (unless OMP_PROC_BIND is set)");
  r.add(&app, "--isa", o.isa, std::string("auto"),
        "kernel path: auto (the widest this CPU runs), avx512_bf16, avx512, avx2 or generic "
        "(a narrower one is for testing and comparison)")
      ->check(CLI::IsMember({"auto", "avx512_bf16", "avx512", "avx2", "generic"}));
  r.add(&app, "--gemm", o.gemm, std::string("onednn"),
        "matrix-product library: onednn (kernels chosen from the CPU's features) or openblas "
        "(the portable fallback; its kernels are the ones OpenBLAS detects)")
      ->check(CLI::IsMember({"onednn", "openblas"}));
}

// The RoPE options of init and train (context extension): one declaration for both. In
// train every default leaves the model's RoPE as it is (0 and "keep").
void declare_rope(Registry& r, CLI::App* c, RopeOptions& o, bool train) {
  r.add(c, "--rope-theta", o.theta, 0.0,
        std::string("RoPE base (rope_theta)") + (train ? " (0 = the model's)" : " (0 = the preset's)"))
      ->check(nonnegative());
  // Hugging Face's rope_scaling, attribute by attribute (rope_scaling.NAME in the file).
  const RopeScaling rd;
  r.add(c, "--rope-scaling", o.scaling, std::string(train ? "keep" : "none"),
        std::string("RoPE scaling (Hugging Face's rope_scaling.rope_type): none, linear, dynamic, "
                    "yarn or llama3") +
            (train ? "; keep = the model's own. A type replaces the model's whole rope_scaling "
                     "with the --rope-* values given (defaults for the others)"
                   : ""))
      ->check(train ? CLI::IsMember({"keep", "none", "linear", "dynamic", "yarn", "llama3"})
                    : CLI::IsMember({"none", "linear", "dynamic", "yarn", "llama3"}));
  r.add(c, "--rope-factor", o.factor, rd.factor,
        "rope_scaling.factor: the context's extension (every type; >= 1)")
      ->check(nonnegative());
  r.add(c, "--rope-original-max-position-embeddings", o.original_max_position_embeddings,
        rd.original_max_position_embeddings,
        "rope_scaling.original_max_position_embeddings: the pre-training context (llama3: "
        "required; yarn: 0 = max_position_embeddings)")
      ->check(count(0));
  r.add(c, "--rope-low-freq-factor", o.low_freq_factor, rd.low_freq_factor,
        "rope_scaling.low_freq_factor (llama3, required; Llama 3.1: 1)")
      ->check(nonnegative());
  r.add(c, "--rope-high-freq-factor", o.high_freq_factor, rd.high_freq_factor,
        "rope_scaling.high_freq_factor (llama3, required; Llama 3.1: 4)")
      ->check(nonnegative());
  r.add(c, "--rope-beta-fast", o.beta_fast, rd.beta_fast, "rope_scaling.beta_fast (yarn)")
      ->check(positive());
  r.add(c, "--rope-beta-slow", o.beta_slow, rd.beta_slow, "rope_scaling.beta_slow (yarn)")
      ->check(positive());
  r.add(c, "--rope-attention-factor", o.attention_factor, rd.attention_factor,
        "rope_scaling.attention_factor (yarn): multiplies cos and sin; 0 = 0.1 ln(factor) + 1 "
        "(or from the mscales)")
      ->check(nonnegative());
  r.add(c, "--rope-mscale", o.mscale, rd.mscale, "rope_scaling.mscale (yarn; 0 = none)")
      ->check(nonnegative());
  r.add(c, "--rope-mscale-all-dim", o.mscale_all_dim, rd.mscale_all_dim,
        "rope_scaling.mscale_all_dim (yarn; 0 = none)")
      ->check(nonnegative());
  r.add(c, "--rope-truncate", o.truncate, rd.truncate,
        "rope_scaling.truncate (yarn): round the correction range to whole dimensions");
}

void declare_init(Registry& r, CLI::App* c, InitOptions& o) {
  std::string presets;
  for (const auto& p : model_preset_names()) presets += (presets.empty() ? "" : ", ") + p;
  r.add(c, "--out", o.out, std::string(), "model file to write (HDF5)", "-o")
      ->required()
      ->check(output_path("file"));
  r.add(c, "--preset", o.preset, std::string("tiny"), "model size preset: " + presets);
  const char* from = " (0 = the preset's)";
  r.add(c, "--vocab-size", o.vocab_size, int64_t(0), std::string("vocabulary size") + from)
      ->check(count(0));
  r.add(c, "--hidden-size", o.hidden_size, int64_t(0), std::string("model width C") + from)
      ->check(count(0));
  r.add(c, "--intermediate-size", o.intermediate_size, int64_t(0),
        std::string("SwiGLU width I") + from)
      ->check(count(0));
  r.add(c, "--num-hidden-layers", o.num_hidden_layers, int64_t(0), std::string("layers L") + from)
      ->check(count(0));
  r.add(c, "--num-attention-heads", o.num_attention_heads, int64_t(0),
        std::string("query heads H") + from)
      ->check(count(0));
  r.add(c, "--num-key-value-heads", o.num_key_value_heads, int64_t(0),
        std::string("key/value heads KV, H % KV == 0") + from)
      ->check(count(0));
  r.add(c, "--max-position-embeddings", o.max_position_embeddings, int64_t(0),
        std::string("longest context the model is meant for") + from)
      ->check(count(0));
  r.add(c, "--rms-norm-eps", o.rms_norm_eps, 0.0, std::string("RMSNorm epsilon") + from)
      ->check(nonnegative());
  r.add(c, "--initializer-range", o.initializer_range, 0.0,
        std::string("std of the normal init of every matrix") + from)
      ->check(nonnegative());
  r.add(c, "--tie-word-embeddings", o.tie_word_embeddings, std::string("preset"),
        "share the embedding and LM-head matrix: true, false or preset")
      ->check(CLI::IsMember({"preset", "true", "false"}));
  r.add(c, "--sliding-window", o.sliding_window, int64_t(-1),
        "sliding-window attention: each token sees itself and the W - 1 before it (0 = none, "
        "full causal; -1 = the preset's)")
      ->check(CLI::Range(int64_t(-1), int64_t(INT32_MAX)));
  declare_rope(r, c, o.rope, false);
  r.add(c, "--seed", o.seed, int64_t(1), "random seed of the initialisation")
      ->check(count(0));
  r.add(c, "--force", o.force, false, "replace the output file if it exists");
}

void declare_prepare(Registry& r, CLI::App* c, PrepareOptions& o) {
  r.add(c, "--out", o.out, std::string(), "dataset file to write (HDF5)", "-o")
      ->required()
      ->check(output_path("file"));
  r.add(c, "inputs", o.inputs, std::vector<std::string>(), "UTF-8 text files, one document each");
  r.add(c, "--separator", o.separator, std::string(),
        "split each file into documents at this string (\"\" = one document per file; "
        "\\n is a newline)");
  r.add(c, "--synthetic", o.synthetic, std::string(),
        "generate data instead of reading files: passkey")
      ->check(CLI::IsMember({"", "passkey"}));
  r.add(c, "--tokenizer", o.tokenizer, std::string("byte"),
        "byte (ids 0-255 are bytes, then BOS, EOS, PAD), or train a SentencePiece model on the "
        "input texts: bpe or unigram (with --vocab-size; byte fallback, unk 0, BOS 1, EOS 2, PAD 3)")
      ->check(CLI::IsMember({"byte", "bpe", "unigram"}));
  r.add(c, "--vocab-size", o.vocab_size, int64_t(0),
        "bpe/unigram: pieces in the trained model, at least 261 (256 byte pieces, unk, BOS, EOS, "
        "PAD, and one learned)")
      ->check(count(0));
  r.add(c, "--tokenizer-model", o.tokenizer_model, std::string(),
        "encode with this existing SentencePiece .model file (e.g. Llama 2's tokenizer.model) "
        "instead of --tokenizer");
  r.add(c, "--num-docs", o.num_docs, int64_t(256), "synthetic: number of documents")
      ->check(count(1));
  r.add(c, "--doc-length", o.doc_length, int64_t(1024),
        "synthetic: tokens per document, BOS and EOS included")
      ->check(count(2));
  r.add(c, "--key-digits", o.key_digits, int64_t(5), "passkey: digits of the key")
      ->check(count(1));
  r.add(c, "--loss-on", o.loss_on, std::string("all"),
        "passkey: which targets the training loss counts: all, or answers (the key's digits "
        "only, stored as a loss mask)")
      ->check(CLI::IsMember({"all", "answers"}));
  r.add(c, "--seed", o.seed, int64_t(1), "synthetic: random seed")
      ->check(count(0));
  r.add(c, "--seq-len", o.seq_len, int64_t(4096),
        "report packing efficiency for sequences of this many tokens")
      ->check(count(1));
  r.add(c, "--progress-every", o.progress_every, 10.0,
        "seconds between progress lines (bytes or documents done, rate); 0 = none")
      ->check(nonnegative());
  r.add(c, "--force", o.force, false, "replace the output file if it exists");
}

void declare_inspect(Registry& r, CLI::App* c, InspectOptions& o) {
  r.add(c, "file", o.file, std::string(), "an HDF5 file (model, dataset, ...) or a run directory")->required();
  r.add(c, "--seq-len", o.seq_len, int64_t(0), "datasets: report packing at this length (0 = no)")
      ->check(count(0));
  r.add(c, "--tensors", o.tensors, true, "models: list every tensor with its norm");
}

void declare_train(Registry& r, CLI::App* c, TrainOptions& o) {
  r.add(c, "--model", o.model, std::string(),
        "model file or checkpoint to start from: a new run (step 1, its own learning-rate "
        "schedule and data order) from its weights; --init-from is another name for it",
        "--init-from")
      ->required();
  r.add(c, "--init-moments", o.init_moments, false,
        "also take the AdamW moments of the checkpoint --model names (not of a model file); "
        "a resumed run takes its own checkpoint's");
  declare_rope(r, c, o.rope, true);
  r.add(c, "--data", o.data, std::string(), "dataset file (lctrain prepare)")->required();
  r.add(c, "--run-dir", o.run_dir, std::string(), "where timing.h5 and checkpoints/ go")
      ->required()
      ->check(output_path("directory"));
  r.add(c, "--seq-len", o.seq_len, int64_t(2048), "tokens per packed sequence")
      ->check(count(2));
  r.add(c, "--seq-len-schedule", o.seq_len_schedule, std::string(),
        "shorter lengths to train at before --seq-len, as LEN:STEPS stages: \"512:200,1024:100\" "
        "with --seq-len 2048 trains steps 1-200 at 512, 201-300 at 1024, the rest at 2048; "
        "each stage re-packs the data at its length (\"\" = --seq-len throughout)");
  r.add(c, "--batch-size", o.batch_size, int64_t(1), "sequences per micro-batch")
      ->check(count(1));
  r.add(c, "--grad-accum", o.grad_accum, int64_t(1), "micro-batches per optimizer step")
      ->check(count(1));
  r.add(c, "--steps", o.steps, int64_t(100), "optimizer steps of the whole run")
      ->check(count(1));
  r.add(c, "--lr", o.lr, 1e-3, "peak learning rate")
      ->check(positive());
  r.add(c, "--min-lr", o.min_lr, 1e-4, "learning rate at the end of the cosine decay")
      ->check(nonnegative());
  r.add(c, "--warmup-steps", o.warmup_steps, int64_t(10), "linear warmup steps")
      ->check(count(0));
  r.add(c, "--beta1", o.beta1, 0.9, "AdamW beta1")
      ->check(fraction());
  r.add(c, "--beta2", o.beta2, 0.95, "AdamW beta2")
      ->check(fraction());
  r.add(c, "--eps", o.eps, 1e-8, "AdamW epsilon")
      ->check(positive());
  r.add(c, "--weight-decay", o.weight_decay, 0.1, "AdamW decoupled weight decay (linear weights)")
      ->check(nonnegative());
  r.add(c, "--decay-norms-embeddings", o.decay_norms_embeddings, false,
        "also decay RMSNorm weights and embeddings");
  r.add(c, "--grad-clip", o.grad_clip, 1.0, "clip the global gradient norm to this (0 = off)")
      ->check(nonnegative());
  r.add(c, "--checkpointing", o.checkpointing, std::string("none"),
        "activation checkpointing: none, attention (recompute attention), full (keep layer inputs)")
      ->check(CLI::IsMember({"none", "attention", "full"}));
  r.add(c, "--block-q", o.block_q, int64_t(128), "flash attention query block")
      ->check(count(1));
  r.add(c, "--block-k", o.block_k, int64_t(128), "flash attention key block")
      ->check(count(1));
  r.add(c, "--seed", o.seed, int64_t(1), "data order seed")
      ->check(count(0));
  r.add(c, "--checkpoint-every", o.checkpoint_every, int64_t(0),
        "write a checkpoint every N steps (0 = only at the end)")
      ->check(count(0));
  r.add(c, "--keep-checkpoints", o.keep_checkpoints, int64_t(2), "keep the newest K checkpoints (K >= 2)")
      ->check(count(2));
  r.add(c, "--keep-every", o.keep_every, int64_t(0),
        "also keep every checkpoint whose step is a multiple of N (0 = none)")
      ->check(count(0));
  r.add(c, "--resume", o.resume, std::string("none"),
        "none; auto (the checkpoint --run-dir/checkpoints/latest names, if any; a damaged one "
        "falls back to the previous of the same run); or a checkpoint file (one of --run-dir's "
        "own: a rollback, later ones are set aside)");
  r.add(c, "--allow-data-change", o.allow_data_change, false,
        "resume even when --data is not the dataset the checkpoint was trained on");
  r.add(c, "--time-limit", o.time_limit, 0.0,
        "seconds from start: checkpoint and exit 85 before it, exit 86 at it (0 = none; the "
        "Slurm scripts pass the job's remaining time)")
      ->check(nonnegative());
  r.add(c, "--comm-timeout", o.comm_timeout, 600.0,
        "abort the job when a rank waits this many seconds in one communication call (0 = never)")
      ->check(nonnegative());
  r.add(c, "--stop-at", o.stop_at, int64_t(0),
        "stop after this step as on SIGUSR1: checkpoint, exit 85 (0 = run to --steps)")
      ->check(count(0));
  r.add(c, "--max-skips", o.max_skips, int64_t(10),
        "stop after this many consecutive steps skipped for a non-finite loss or gradient")
      ->check(count(0));
  r.add(c, "--log-every", o.log_every, int64_t(1), "print a step line every N steps")
      ->check(count(1));
  r.add(c, "--peak-gflops", o.peak_gflops, 0.0,
        "peak for MFU in GFLOP/s per rank (0 = the multiply-add peak measured at start-up)")
      ->check(nonnegative());
  r.add(c, "--force", o.force, false,
        "start over in a run directory that holds a previous run (its files are moved into "
        "replaced-DATE-TIME/ inside it, never deleted)");
  r.add(c, "--dp", o.dp, int64_t(0), "data-parallel degree (0 = world size / cp)")
      ->check(count(0));
  r.add(c, "--cp", o.cp, int64_t(1), "context-parallel degree: ranks that split each sequence")
      ->check(count(1));
  r.add(c, "--zero", o.zero, int64_t(0),
        "sharded data parallelism over the dp x cp ranks (ZeRO stage): 0 = every rank holds "
        "everything; 1 = each rank keeps and updates 1/world of the AdamW moments, then the ranks "
        "all-gather the parameters (the same bits as 0); 2 = as 1, with the gradients "
        "reduce-scattered instead of all-reduced; 3 (FSDP, fp32) = each rank keeps 1/world of the "
        "parameters and gradients too, each layer all-gathered just before use and its gradients "
        "reduce-scattered just after. One rank: nothing to shard, the same as 0")
      ->check(CLI::Range(int64_t(0), int64_t(3)));
  r.add(c, "--cp-algo", o.cp_algo, std::string("ring"),
        "context-parallel attention: ring (K/V travel the ring), allgather (Llama 3), ulysses "
        "(all-to-all to a head split; heads and KV heads divisible by cp) or hybrid (Ulysses "
        "over --ulysses-degree consecutive cp ranks, a ring across those groups)")
      ->check(CLI::IsMember({"ring", "allgather", "ulysses", "hybrid"}));
  r.add(c, "--ulysses-degree", o.ulysses_degree, int64_t(0),
        "--cp-algo hybrid only: U, the cp ranks of one Ulysses all-to-all (usually the cp "
        "ranks on one node); the ring runs over cp / U. U must divide cp, the heads and the KV "
        "heads; U = 1 is a ring, U = cp is Ulysses")
      ->check(count(0));
  r.add(c, "--cp-transport", o.cp_transport, std::string("auto"),
        "how ring blocks travel (hybrid: on its ring): shm (ranks of one node write into each other's slots in an MPI "
        "shared-memory window; hops across nodes use MPI), mpi (two-sided MPI), auto (shm)")
      ->check(CLI::IsMember({"auto", "shm", "mpi"}));
  r.add(c, "--cp-split", o.cp_split, std::string("auto"),
        "how sequences are cut across cp ranks: zigzag (balances causal work), contiguous "
        "(balances sliding-window work, and the ring needs 1 hop when the window fits in a "
        "rank's share), auto (contiguous when the model's sliding_window <= seq-len / cp, "
        "else zigzag)")
      ->check(CLI::IsMember({"auto", "zigzag", "contiguous"}));
  r.add(c, "--precision", o.precision, std::string("fp32"),
        "matrix products: fp32, or bf16 (bf16 weights copy, activations and ring K/V, gradient "
        "communication; fp32 master weights, optimizer, norms, softmax statistics, loss and "
        "accumulation)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  r.add(c, "--dry-run", o.dry_run, false,
        "check everything and print the start-up table and memory estimate, then stop");
}

void declare_eval(Registry& r, CLI::App* c, EvalOptions& o) {
  r.add(c, "--model", o.model, std::string(), "model file or checkpoint")->required();
  r.add(c, "--data", o.data, std::string(), "dataset file")->required();
  r.add(c, "--seq-len", o.seq_len, int64_t(2048), "tokens per packed sequence")
      ->check(count(2));
  r.add(c, "--batch-size", o.batch_size, int64_t(1), "sequences per forward pass")
      ->check(count(1));
  r.add(c, "--max-sequences", o.max_sequences, int64_t(0), "evaluate only the first N sequences (0 = all)")
      ->check(count(0));
  r.add(c, "--cp", o.cp, int64_t(1),
        "context-parallel degree: every sequence split over this many ranks (the world size), "
        "attention by the ring as in train, for lengths one rank cannot hold")
      ->check(count(1));
  r.add(c, "--out", o.out, std::string(), "also write the results to this HDF5 file")
      ->check(output_path("file"));
  r.add(c, "--precision", o.precision, std::string("fp32"), "matrix products: fp32 or bf16 (as in train)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  r.add(c, "--block-q", o.block_q, int64_t(128), "flash attention query block")
      ->check(count(1));
  r.add(c, "--block-k", o.block_k, int64_t(128), "flash attention key block")
      ->check(count(1));
  r.add(c, "--progress-every", o.progress_every, 10.0,
        "seconds between progress lines (sequences done, rate, time left); 0 = none")
      ->check(nonnegative());
  r.add(c, "--force", o.force, false, "replace --out if it exists");
}

void declare_bench(Registry& r, CLI::App* c, BenchOptions& o) {
  r.add(c, "what", o.what, std::string("attention"),
        "what to measure: attention (kernel vs the peak and the GEMM library), gemm (a training "
        "step's matrix products, oneDNN vs OpenBLAS) or ring (permute bandwidth, attention per step)")
      ->check(CLI::IsMember({"attention", "gemm", "ring"}));
  r.add(c, "--seq-len", o.seq_lens, std::string("4096,16384,32768"),
        "sequence lengths (gemm: tokens per product), comma-separated");
  r.add(c, "--preset", o.preset, std::string("30m"), "gemm: the model preset whose products are measured");
  r.add(c, "--heads", o.heads, int64_t(8), "query heads")
      ->check(count(1));
  r.add(c, "--kv-heads", o.kv_heads, int64_t(8), "key/value heads")
      ->check(count(1));
  r.add(c, "--head-dim", o.head_dim, int64_t(64), "head dimension")
      ->check(count(1));
  r.add(c, "--repeats", o.repeats, int64_t(3), "timed repetitions (the median is reported)")
      ->check(count(1));
  r.add(c, "--block-q", o.block_q, int64_t(128), "flash attention query block")
      ->check(count(1));
  r.add(c, "--block-k", o.block_k, int64_t(128), "flash attention key block")
      ->check(count(1));
  r.add(c, "--causal", o.causal, true, "causal mask (FLOPs halved)");
  r.add(c, "--backward", o.backward, true, "also time forward+backward");
  r.add(c, "--precision", o.precision, std::string("fp32"),
        "attention: fp32 or bf16 inputs and products (%peak against that precision's peak)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  r.add(c, "--sizes", o.sizes, std::string("4,64,1024,4096,16384,65536"),
        "ring: message sizes in KiB, comma-separated");
  r.add(c, "--out", o.out, std::string(), "write the table to this HDF5 file")
      ->check(output_path("file"));
  r.add(c, "--force", o.force, false, "replace --out if it exists");
}

void declare_plan(Registry& r, CLI::App* c, PlanOptions& o) {
  r.add(c, "--model", o.model, std::string(), "model file or checkpoint (its configuration; default: --preset)");
  r.add(c, "--preset", o.preset, std::string("30m"), "model preset, when no --model is given");
  r.add(c, "--seq-len", o.seq_len, int64_t(32768), "tokens per sequence")
      ->check(count(2));
  r.add(c, "--global-batch", o.global_batch, int64_t(1), "sequences per optimizer step (all ranks)")
      ->check(count(1));
  r.add(c, "--nodes", o.nodes, int64_t(1), "nodes of the job")
      ->check(count(1));
  r.add(c, "--cores-per-node", o.cores_per_node, int64_t(0),
        "cores of a node the job uses (0 = this rank's threads: the machine plan runs on)")
      ->check(count(0));
  r.add(c, "--mem-per-node", o.mem_per_node_gib, 0.0,
        "GiB of memory a node gives the job (0 = what is available here, cgroup limits included)")
      ->check(nonnegative());
  r.add(c, "--precision", o.precision, std::string("fp32,bf16"), "precisions to consider, comma-separated");
  r.add(c, "--checkpointing", o.checkpointing, std::string("none,attention,full"),
        "activation checkpointing policies to consider, comma-separated");
  r.add(c, "--zero", o.zero, std::string("0,1,2,3"), "ZeRO stages to consider, comma-separated");
  r.add(c, "--cp-algo", o.cp_algo, std::string("ring,ulysses"), "cp algorithms to consider, comma-separated");
  r.add(c, "--intra-gbs", o.intra_gbs, 0.0,
        "GB/s of a transfer between ranks of a node (0 = a memcpy measured here: the copy a hop makes)")
      ->check(nonnegative());
  r.add(c, "--inter-gbs", o.inter_gbs, 12.5, "GB/s of a node's network link (12.5 = 100 Gb/s)")
      ->check(positive());
  r.add(c, "--inter-latency-us", o.inter_latency_us, 2.0, "microseconds per message between nodes")
      ->check(nonnegative());
  r.add(c, "--top", o.top, int64_t(10), "layouts to show")
      ->check(count(1));
}

void declare_convert(Registry& r, CLI::App* c, ConvertOptions& o) {
  r.add(c, "--from-hf", o.from_hf, std::string(),
        "read this Hugging Face Llama directory (config.json + model.safetensors, or a sharded "
        "model.safetensors.index.json; F32, BF16 or F16) and write the model file -o");
  r.add(c, "--to-hf", o.to_hf, std::string(),
        "write the model file --model as a Hugging Face Llama directory (config.json + "
        "model.safetensors), created if absent")
      ->check(output_path("directory"));
  r.add(c, "--out", o.out, std::string(), "--from-hf: the model file to write (HDF5)", "-o")
      ->check(output_path("file"));
  r.add(c, "--model", o.model, std::string(), "--to-hf: the model file or checkpoint to read");
  r.add(c, "--dtype", o.dtype, std::string("fp32"),
        "--to-hf: dtype of the safetensors weights: fp32 (exact) or bf16 (rounded to nearest even)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  r.add(c, "--force", o.force, false, "replace the output file(s) if they exist");
}

// convert's options belong together: one direction, and the file of that direction.
std::string convert_rule(const ConvertOptions& o) {
  if (o.from_hf.empty() == o.to_hf.empty())
    return "convert needs exactly one of --from-hf DIR (with -o MODEL.h5) and --to-hf DIR (with --model MODEL.h5)";
  if (!o.from_hf.empty() && (o.out.empty() || !o.model.empty()))
    return "convert --from-hf DIR writes the model file -o MODEL.h5: give -o (and no --model)";
  if (!o.to_hf.empty() && (o.model.empty() || !o.out.empty()))
    return "convert --to-hf DIR reads the model file --model MODEL.h5: give --model (and no -o)";
  return "";
}

// prepare's tokenizer options belong together: a tokenizer to train takes a vocabulary size,
// an existing model or the byte tokenizer none; passkey data is byte-tokenized.
std::string prepare_rule(const PrepareOptions& o) {
  const bool train = o.tokenizer != "byte", given = !o.tokenizer_model.empty();
  if (!o.synthetic.empty() && (train || given))
    return "--synthetic passkey generates byte-tokenized documents (its answers are byte positions): "
           "drop --tokenizer and --tokenizer-model";
  if (given && train)
    return cat("--tokenizer-model ", o.tokenizer_model, " is the tokenizer (its type is in the model): ",
               "drop --tokenizer ", o.tokenizer, ", or drop --tokenizer-model to train a new one");
  if (given && o.vocab_size)
    return "--vocab-size is the model's own with --tokenizer-model: drop --vocab-size";
  if (!train && o.vocab_size)
    return "the byte tokenizer's vocabulary is fixed (259 ids): drop --vocab-size, or train a "
           "SentencePiece model with --tokenizer bpe or unigram";
  if (train && !o.vocab_size)
    return cat("--tokenizer ", o.tokenizer, " trains a model of --vocab-size pieces: give it (e.g. ",
               "--vocab-size 8000)");
  if (train && o.vocab_size < kSentencePieceReserved + 1)
    return cat("--vocab-size ", o.vocab_size, " is too small: byte fallback takes 256 pieces and ",
               "unk, BOS, EOS and PAD 4 more; give at least ", kSentencePieceReserved + 1);
  return "";
}

std::string joined_command_line(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    const bool quote = a.empty() || a.find_first_of(" \t\"'$") != std::string::npos;
    s += (i ? " " : "") + (quote ? "'" + a + "'" : a);
  }
  return s;
}

}  // namespace

Invocation parse_command_line(int argc, char** argv) {
  Invocation inv;
  inv.command_line = joined_command_line(argc, argv);
  CLI::App app("lctrain: long-context transformer training on CPU clusters (OpenMP + MPI)",
               "lctrain");
  app.config_formatter(std::make_shared<TomlConfig>());
  app.formatter(std::make_shared<Help>());  // before the subcommands, which copy it
  app.set_config("--config", "",
                 "TOML file: global keys at the top, a [init]/[prepare]/[train]/... section per subcommand")
      ->check(CLI::ExistingFile);
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.set_version_flag("--version", std::function<std::string()>(version_text));
  app.fallthrough();  // global options may follow the subcommand
  app.require_subcommand(1);
  app.footer("Exit codes: 0 success, 1 error, 2 bad command line, 85 stopped for requeue after a "
             "checkpoint, 86 stopped at once (second signal or past --time-limit: resume from the "
             "last checkpoint), 87 the job was aborted (a rank failed alone or hung).");

  Registry reg;
  declare_global(reg, app, inv.global);
  CLI::App* init = app.add_subcommand("init", "write a new model file from a preset or sizes");
  declare_init(reg, init, inv.init);
  CLI::App* prepare = app.add_subcommand("prepare", "tokenize text files or generate passkey data");
  declare_prepare(reg, prepare, inv.prepare);
  CLI::App* inspect = app.add_subcommand("inspect", "show what an lctrain HDF5 file or run directory holds");
  declare_inspect(reg, inspect, inv.inspect);
  CLI::App* train = app.add_subcommand("train", "train a model on a dataset");
  declare_train(reg, train, inv.train);
  CLI::App* eval = app.add_subcommand("eval", "loss and passkey retrieval of a model on a dataset");
  declare_eval(reg, eval, inv.eval);
  CLI::App* bench = app.add_subcommand("bench", "measure kernels against sgemm on the same cores");
  declare_bench(reg, bench, inv.bench);
  CLI::App* plan = app.add_subcommand(
      "plan", "rank the layouts of a training job on a machine by predicted step time and memory");
  declare_plan(reg, plan, inv.plan);
  CLI::App* convert = app.add_subcommand(
      "convert", "convert between a Hugging Face Llama directory (safetensors) and a model file");
  declare_convert(reg, convert, inv.convert);

  std::ostringstream out, err;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ConfigError& e) {
    // CLI11 says "INI was not able to parse init.sede": say which file and what to do.
    const std::string what = e.what();
    const size_t at = what.rfind("parse ");
    const std::string key = at == std::string::npos ? what : what.substr(at + 6);
    inv.exit_code = 2;
    inv.error = "config file '" + app["--config"]->as<std::string>() + "': unknown option '" +
                key + "'. Keys are option names (snake_case or dashed) inside a [subcommand] " +
                "section, global options at the top; 'lctrain SUBCOMMAND --help' lists them\n";
    return inv;
  } catch (const ConfigRepeat& e) {
    inv.exit_code = 2;
    inv.error = "config file '" + app["--config"]->as<std::string>() + "': " + e.what() + "\n";
    return inv;
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e, out, err);
    inv.exit_code = code == 0 ? 0 : 2;
    inv.output = out.str();
    inv.error = err.str();
    return inv;
  }
  const CLI::App* chosen = app.get_subcommands().at(0);
  inv.command = chosen->get_name();
  // The one rule that ties two options together.
  if (inv.command == "train" && inv.train.min_lr > inv.train.lr) {
    inv.exit_code = 2;
    inv.error = cat("--min-lr ", inv.train.min_lr, " is above --lr ", inv.train.lr,
                    ": the cosine decay goes from --lr down to --min-lr; lower --min-lr\n");
    return inv;
  }
  if (inv.command == "prepare") {
    if (std::string rule = prepare_rule(inv.prepare); !rule.empty()) {
      inv.exit_code = 2;
      inv.error = rule + "\n";
      return inv;
    }
  }
  if (inv.command == "convert") {
    if (std::string rule = convert_rule(inv.convert); !rule.empty()) {
      inv.exit_code = 2;
      inv.error = rule + "\n";
      return inv;
    }
  }
  inv.settings = reg.resolved({&app, chosen});
  return inv;
}

}  // namespace lct
