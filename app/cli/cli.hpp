// Command-line options of every subcommand as plain structs. Declared (name, default, help)
// once each in cli.cpp, the only file that includes CLI11; that declaration also drives the
// start-up table and the provenance attributes of every file written.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/bf16.hpp"
#include "common/provenance.hpp"
#include "kernels/attention.hpp"
#include "kernels/gemm.hpp"
#include "model/checkpointing.hpp"
#include "parallel/parallel_plan.hpp"
#include "sys/cpu.hpp"

namespace lct {

// The names an enum option takes, each with its value: options hold the enum, parsed at the
// door (app/cli/cli_registry.hpp, Registry::add_choice); `plan`'s candidate lists read theirs
// with choice_of().
template <class E>
using Choices = std::vector<std::pair<std::string, E>>;
const Choices<Precision>& precision_choices();
const Choices<GradReduce>& grad_reduce_choices();
const Choices<Balance>& balance_choices();
const Choices<AttnKernel>& attention_kernel_choices();
const Choices<std::optional<AttnKernel>>& attention_kernel_auto_choices();  // "auto": none forced
const Choices<Checkpointing>& checkpointing_choices();
const Choices<GemmLib>& gemm_choices();
const Choices<std::optional<Isa>>& isa_choices();  // "auto": none forced
// prepare's: what data to generate, which targets the loss counts, which tokenizer.
enum class SyntheticData { None, Passkey, Recall, Copy };
enum class LossOn { All, Answers };
enum class TokenizerKind { Byte, Bpe, Unigram };
const Choices<SyntheticData>& synthetic_choices();
const Choices<LossOn>& loss_on_choices();
const Choices<TokenizerKind>& tokenizer_choices();
enum class BenchWhat { Attention, Gemm, Ring, Peak };  // bench's measurement
const Choices<BenchWhat>& bench_choices();
const Choices<std::optional<bool>>& preset_or_bool_choices();  // "preset" (none), "true", "false"
template <class E>
E choice_of(const Choices<E>& choices, const std::string& name) {
  for (const auto& [n, v] : choices)
    if (n == name) return v;
  return choices.front().second;  // unreachable behind the option's check
}
template <class E>
const std::string& name_of(const Choices<E>& choices, const E& value) {
  for (const auto& [n, v] : choices)
    if (v == value) return n;
  return choices.front().first;  // every value has a name
}

struct GlobalOptions {
  std::string config;       // TOML file
  int threads;              // OpenMP threads per rank, 0 = automatic
  bool oversubscribe;       // allow more threads x ranks than CPUs
  bool bind_threads;
  std::optional<Isa> isa;   // kernel path forced (none: auto, the widest the CPU runs)
  GemmLib gemm;             // matrix-product library
};

// The RoPE settings init writes and train may change for a context extension: rope_theta and
// Hugging Face's rope_scaling (ModelConfig::rope_scaling), declared once in cli.cpp for both
// subcommands and applied by apply_rope_options (app/cli/rope_options.hpp).
struct RopeOptions {
  double theta;         // rope_theta; 0 = the preset's (init) or the model's (train)
  std::string scaling;  // "none" or a rope_type; train also "keep" (the model's own)
  double factor, low_freq_factor, high_freq_factor, beta_fast, beta_slow, attention_factor, mscale,
      mscale_all_dim;
  int64_t original_max_position_embeddings;
  bool truncate;
};

// How a context-parallel group computes attention: train's and eval's, declared once
// (app/cli/cli_options.cpp) and read into the run's ParallelPlan (app/cli/parallel_options.cpp).
struct CpOptions {
  std::string algo, split, transport;
  int64_t ulysses_degree;  // hybrid: Ulysses ranks per ring position; 0 = not given
};

struct InitOptions {
  std::string out;
  std::string preset;
  // 0 (or "preset") takes the preset's value.
  int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
      num_key_value_heads, max_position_embeddings;
  double rms_norm_eps, initializer_range;
  std::optional<bool> tie_word_embeddings;  // none: the preset's
  int64_t sliding_window;           // -1 = the preset's, 0 = none
  RopeOptions rope;
  int64_t seed;
  bool force;
};

struct PrepareOptions {
  std::string out;
  std::vector<std::string> inputs;  // UTF-8 text files
  std::string separator;            // split files into documents on this string ("" = per file)
  SyntheticData synthetic;          // None: text files
  LossOn loss_on;                   // Answers: a loss mask on the answers (a key's digits, a copy)
  TokenizerKind tokenizer;          // Byte, or a SentencePiece model to train
  int64_t vocab_size;               // bpe/unigram: pieces to learn (0 = not given)
  std::string tokenizer_model;      // an existing SentencePiece .model file ("" = none)
  int64_t num_docs, doc_length, key_digits, seed;
  std::string doc_lengths;          // passkey: comma-separated lengths taken in turn ("" = doc_length)
  double copy_repeats;              // copy: share of digit strings with repeats (0 = all distinct)
  int64_t copy_gap_words;           // copy: at most this many random words between the copies
  int64_t seq_len;                  // report packing efficiency at this length
  double progress_every;            // seconds between progress lines; 0 = none
  bool force;
};

struct InspectOptions {
  std::string file;
  int64_t seq_len;
  bool tensors;
};

struct TrainOptions {
  std::string model, data, run_dir;  // model: a model file or a checkpoint (also --init-from)
  bool init_moments;                 // also take the checkpoint --model's AdamW moments
  RopeOptions rope;                  // context extension: changes to --model's RoPE
  int64_t seq_len, batch_size, grad_accum, steps;
  std::string seq_len_schedule;      // "LEN:STEPS,..." stages before --seq-len; "" = none
  double lr, min_lr;
  int64_t warmup_steps;
  double beta1, beta2, eps, weight_decay;
  bool decay_norms_embeddings;
  double grad_clip;
  Checkpointing checkpointing;
  std::string offload_activations;  // "" (none), a directory, or numa:N (TierSpec)
  std::string offload_optimizer;    // the same, for the AdamW moments
  bool offload_master;               // the fp32 master weights too (bf16)
  int64_t mlp_tile;                  // tokens per MLP tile; 0 = untiled (ModelShape::mlp_tile)
  int64_t offload_layers;            // of --offload-activations: the first N layers; -1 = all that can
  int64_t block_q, block_k;
  int64_t seed, checkpoint_every, keep_checkpoints, keep_every, log_every;
  std::string resume;         // none | auto | checkpoint path
  double time_limit;          // seconds since start; 0 = none
  double comm_timeout;        // seconds a rank may wait in one communication call; 0 = none
  int64_t max_skips;          // consecutive non-finite steps before the run stops
  int64_t stop_at;            // stop as on a signal after this step; 0 = none
  double progress_every;      // seconds between progress lines inside long steps and start-up; 0 = none
  double peak_gflops;
  bool force, dry_run, allow_data_change;
  int64_t dp, cp, tp;
  bool tp_sequence_parallel;  // the residual stream split by tokens over the tp group
  CpOptions cp_attention;
  int64_t zero;               // 0: optimizer replicated; 1: AdamW moments sharded over all ranks
  GradReduce grad_reduce;     // the gradient all-reduce: hierarchical across nodes, or flat
  Balance balance;            // where a step's tokens go on the dp x cp ranks: by work, or fixed slices
  std::optional<AttnKernel> attention_kernel;  // the attention path; none: timed at start-up ("auto")
  Precision precision;        // of matrix products
  int64_t eval_every;         // evaluate on eval_data every N steps and at the last; 0 = never
  std::string eval_data;      // held-out dataset file for --eval-every
  int64_t eval_sequences;     // its first K packed sequences
  double until_retrieval;     // end the run once an evaluation retrieves this share; 0 = never
};

struct EvalOptions {
  std::string model, data, out;
  Precision precision;
  int64_t seq_len, batch_size, max_sequences, block_q, block_k;
  int64_t dp;             // replicas sharing the sequences; 0 = world size / cp
  int64_t cp;             // ranks each sequence is split over
  CpOptions cp_attention;
  double progress_every;  // seconds between progress lines; 0 = none
  double comm_timeout;    // seconds a rank may wait in one communication call; 0 = none
  bool force;
};

struct ConvertOptions {
  std::string from_hf, to_hf;  // exactly one: the Hugging Face directory read or written
  std::string out, model;      // --from-hf writes `out`; --to-hf reads `model`
  Precision dtype;             // --to-hf: of the safetensors weights
  bool force;
};

struct BenchOptions {
  BenchWhat what;
  std::string preset;  // gemm: the model whose products are measured
  std::string seq_lens;  // comma-separated
  int64_t heads, kv_heads, head_dim, repeats, block_q, block_k;
  bool causal, backward;
  Precision precision;  // attention: of the products; gemm: measured in both
  AttnKernel attention_kernel;  // attention: which path
  std::string sizes;  // ring: message sizes in KiB
  double seconds;  // peak: how long the probe runs
  std::string out;
  bool force;
};

struct PlanOptions {
  std::string model, preset;  // the model: a file, or a preset when no file is given
  int64_t seq_len, global_batch, nodes, cores_per_node;
  double mem_per_node_gib;
  std::string precision, checkpointing, zero, cp_algo;  // comma-separated candidates
  double intra_gbs, inter_gbs, inter_latency_us;
  std::string offload_activations;  // a tier to consider ("" none), as train's flag
  double tier_gbs;                  // its GB/s per node each way; 0 = measured
  std::string mlp_tile;             // comma-separated --mlp-tile candidates
  int64_t top;
};

struct Invocation {
  std::string command;  // the subcommand chosen
  GlobalOptions global;
  InitOptions init;
  PrepareOptions prepare;
  InspectOptions inspect;
  TrainOptions train;
  EvalOptions eval;
  BenchOptions bench;
  PlanOptions plan;
  ConvertOptions convert;
  std::vector<Setting> settings;  // resolved global options, then the subcommand's
  std::string command_line;
  // Parsing alone ended the run (help, --version, a usage error): exit with `exit_code`
  // after printing `output` (stdout) or `error` (stderr).
  int exit_code = -1;
  std::string output, error;
};

Invocation parse_command_line(int argc, char** argv);

// Version, git revision and the versions of every library lctrain links.
std::string version_text();

}  // namespace lct
