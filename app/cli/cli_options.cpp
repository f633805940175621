// Every option of lctrain, declared once: its name, default, help and rule. The declaration
// drives CLI11, the checks, the start-up table and the provenance (Registry, cli_registry.hpp).
#include <initializer_list>
#include <string>

#include "app/cli/cli_registry.hpp"
#include "app/cli/parallel_options.hpp"
#include "data/sentencepiece.hpp"
#include "model/config.hpp"
#include "parallel/zero/zero_variant.hpp"

namespace lct {

namespace {
// Each value under the name its own naming function gives, in the order the option lists them.
template <class E, class Name>
Choices<E> named(std::initializer_list<E> values, Name name) {
  Choices<E> c;
  for (const E& v : values) c.emplace_back(name(v), v);
  return c;
}
}  // namespace

const Choices<Precision>& precision_choices() {
  static const Choices<Precision> c = named({Precision::Fp32, Precision::Bf16}, precision_name);
  return c;
}

const Choices<Checkpointing>& checkpointing_choices() {
  static const Choices<Checkpointing> c =
      named({Checkpointing::None, Checkpointing::Attention, Checkpointing::Full},
            [](Checkpointing k) { return to_string(k); });
  return c;
}

const Choices<GradReduce>& grad_reduce_choices() {
  static const Choices<GradReduce> c = named({GradReduce::Hierarchical, GradReduce::Flat}, grad_reduce_name);
  return c;
}

const Choices<Balance>& balance_choices() {
  static const Choices<Balance> c = named({Balance::Cost, Balance::None}, balance_name);
  return c;
}

const Choices<AttnKernel>& attention_kernel_choices() {
  static const Choices<AttnKernel> c = named({AttnKernel::Fused, AttnKernel::OneDnn}, attn_kernel_name);
  return c;
}

const Choices<std::optional<AttnKernel>>& attention_kernel_auto_choices() {
  static const Choices<std::optional<AttnKernel>> c = named<std::optional<AttnKernel>>(
      {std::nullopt, AttnKernel::Fused, AttnKernel::OneDnn},
      [](const std::optional<AttnKernel>& k) { return k ? attn_kernel_name(*k) : "auto"; });
  return c;
}

const Choices<GemmLib>& gemm_choices() {
  static const Choices<GemmLib> c = named({GemmLib::OneDnn, GemmLib::OpenBlas}, gemm_lib_name);
  return c;
}

const Choices<std::optional<Isa>>& isa_choices() {  // "auto": none forced
  static const Choices<std::optional<Isa>> c = named<std::optional<Isa>>(
      {std::nullopt, Isa::Avx512Bf16, Isa::Avx512, Isa::Avx2, Isa::Generic},
      [](const std::optional<Isa>& i) { return i ? isa_name(*i) : "auto"; });
  return c;
}

const Choices<SyntheticData>& synthetic_choices() {
  static const Choices<SyntheticData> c{{"", SyntheticData::None},
                                        {"passkey", SyntheticData::Passkey},
                                        {"recall", SyntheticData::Recall},
                                        {"copy", SyntheticData::Copy}};
  return c;
}

const Choices<LossOn>& loss_on_choices() {
  static const Choices<LossOn> c{{"all", LossOn::All}, {"answers", LossOn::Answers}};
  return c;
}

const Choices<TokenizerKind>& tokenizer_choices() {
  static const Choices<TokenizerKind> c{
      {"byte", TokenizerKind::Byte}, {"bpe", TokenizerKind::Bpe}, {"unigram", TokenizerKind::Unigram}};
  return c;
}

const Choices<BenchWhat>& bench_choices() {
  static const Choices<BenchWhat> c{
      {"attention", BenchWhat::Attention}, {"gemm", BenchWhat::Gemm}, {"ring", BenchWhat::Ring},
      {"peak", BenchWhat::Peak}};
  return c;
}

const Choices<std::optional<bool>>& preset_or_bool_choices() {
  static const Choices<std::optional<bool>> c{{"preset", std::nullopt}, {"true", true}, {"false", false}};
  return c;
}

}  // namespace lct

namespace lct::cli_detail {

void declare_global(Registry& r, CLI::App& app, GlobalOptions& o) {
  r.add(&app, "--threads", o.threads, 0,
        "OpenMP threads per rank; 0 = the CPUs this rank owns (cpuset / ranks on the host)")
      ->check(count(0));
  r.add(&app, "--oversubscribe", o.oversubscribe, false,
        "allow more threads x ranks than CPUs (functional tests only: it ruins speed)");
  r.add(&app, "--bind-threads", o.bind_threads, true,
        "pin OpenMP thread i to the i-th CPU of the rank's cpuset (unless OMP_PROC_BIND is set)");
  r.add_choice(&app, "--isa", o.isa, std::optional<Isa>(), isa_choices(),
               "kernel path: auto (the widest this CPU runs), avx512_bf16, avx512, avx2 or generic "
               "(a narrower one is for testing and comparison)");
  r.add_choice(&app, "--gemm", o.gemm, GemmLib::OneDnn, gemm_choices(),
               "matrix-product library: onednn (kernels chosen from the CPU's features; where they are "
               "avx2, the weight gradients on OpenBLAS, faster there) or openblas (the portable "
               "fallback; its kernels are the ones OpenBLAS detects)");
}

namespace {

// Options that several subcommands take with one meaning: declared here once, with their rule.
void declare_packed_length(Registry& r, CLI::App* c, int64_t& seq_len) {  // train, eval
  r.add(c, "--seq-len", seq_len, int64_t(2048), "tokens per packed sequence")
      ->check(count(2));
}
void declare_flash_blocks(Registry& r, CLI::App* c, int64_t& block_q, int64_t& block_k) {  // train, eval, bench
  r.add(c, "--block-q", block_q, int64_t(128), "flash attention query block")
      ->check(count(1));
  r.add(c, "--block-k", block_k, int64_t(128), "flash attention key block")
      ->check(count(1));
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

}  // namespace

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
  r.add_choice(c, "--tie-word-embeddings", o.tie_word_embeddings, std::optional<bool>(), preset_or_bool_choices(),
               "share the embedding and LM-head matrix: true, false or preset");
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
  r.add_choice(c, "--synthetic", o.synthetic, SyntheticData::None, synthetic_choices(),
               "generate data instead of reading files: passkey (one key hidden in filler, asked for at "
               "the end), recall (dense key-value statements whose keys are asked for again), or copy "
               "(random strings each said twice: \"k3xq9 k3xq9. \")");
  r.add_choice(c, "--tokenizer", o.tokenizer, TokenizerKind::Byte, tokenizer_choices(),
               "byte (ids 0-255 are bytes, then BOS, EOS, PAD), or train a SentencePiece model on the "
               "input texts: bpe or unigram (with --vocab-size; byte fallback, unk 0, BOS 1, EOS 2, PAD 3)");
  r.add(c, "--vocab-size", o.vocab_size, int64_t(0),
        "bpe/unigram: pieces in the trained model, at least 261 (256 byte pieces, unk, BOS, EOS, "
        "PAD, and one learned)")
      ->check(count(0));
  r.add(c, "--tokenizer-model", o.tokenizer_model, std::string(),
        "encode with this existing SentencePiece .model file (e.g. Llama 2's tokenizer.model), or "
        "the one an lctrain dataset, model file or checkpoint holds, instead of --tokenizer");
  r.add(c, "--num-docs", o.num_docs, int64_t(256), "synthetic: number of documents")
      ->check(count(1));
  r.add(c, "--doc-length", o.doc_length, int64_t(1024),
        "synthetic: tokens per document, BOS and EOS included")
      ->check(count(2));
  r.add(c, "--doc-lengths", o.doc_lengths, std::string(),
        "passkey, copy: several document lengths, comma-separated (\"512,1024,2048\"): the documents "
        "take them in turn, --num-docs in all; or powerlaw:MIN:MAX[:ALPHA] (\"powerlaw:128:32768\"): "
        "each document's length drawn from MIN to MAX with density length^-ALPHA (1.5 unless given; "
        "1 is log-uniform), from --seed: most documents short, a few very long, as in long-context "
        "corpora; replaces --doc-length (\"\" = --doc-length only)");
  r.add(c, "--key-digits", o.key_digits, int64_t(5), "passkey, recall: digits of each key")
      ->check(count(1));
  r.add_choice(c, "--loss-on", o.loss_on, LossOn::All, loss_on_choices(),
               "passkey, recall, copy: which targets the training loss counts: all, or answers (the "
               "digits of the keys asked for; copy: each string's second copy), stored as a loss mask");
  r.add(c, "--copy-repeats", o.copy_repeats, 0.0,
        "copy: the share of strings made of digits drawn with replacement (\"92225\"), whose "
        "repeated symbols make the second copy depend on the place in the string, as a "
        "passkey's digits do; the others are distinct symbols (0 = all distinct)")
      ->check(number(false, 0, false, 1, false));
  r.add(c, "--copy-gap-words", o.copy_gap_words, int64_t(0),
        "copy: 0 to N random words between each string and its second copy, so that only its "
        "symbols say where the first copy is (content-based copying); the copy's first symbol "
        "is then not scored (0 = the copy follows at once)")
      ->check(count(0));
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

// The cp attention's options, the same for train and eval.
void declare_cp_attention(Registry& r, CLI::App* c, CpOptions& o) {
  r.add(c, "--cp-algo", o.algo, std::string("ring"),
        "context-parallel attention: ring (K/V travel the ring), allgather (Llama 3), ulysses "
        "(all-to-all to a head split; heads and KV heads divisible by cp) or hybrid (Ulysses "
        "over --ulysses-degree consecutive cp ranks, a ring across those groups)")
      ->check(CLI::IsMember(cp_algo_names()));
  r.add(c, "--ulysses-degree", o.ulysses_degree, int64_t(0),
        "--cp-algo hybrid only: U, the cp ranks of one Ulysses all-to-all (usually the cp "
        "ranks on one node); the ring runs over cp / U. U must divide cp, the heads and the KV "
        "heads; U = 1 is a ring, U = cp is Ulysses")
      ->check(count(0));
  r.add(c, "--cp-transport", o.transport, std::string("auto"),
        "how ring blocks travel (hybrid: on its ring): shm (ranks of one node write into each other's slots in an MPI "
        "shared-memory window; hops across nodes use MPI), mpi (two-sided MPI), auto (shm)")
      ->check(CLI::IsMember(cp_transport_names()));
  r.add(c, "--cp-split", o.split, std::string("auto"),
        "how sequences are cut across cp ranks: zigzag (balances causal work), contiguous "
        "(balances sliding-window work, and the ring needs 1 hop when the window fits in a "
        "rank's share), auto (contiguous when the model's sliding_window <= seq-len / cp, "
        "else zigzag)")
      ->check(CLI::IsMember(cp_split_names()));
}

// train's options by concern, each block in the order --help lists them.
// What the run reads and the shape of its steps.
void declare_train_inputs(Registry& r, CLI::App* c, TrainOptions& o) {
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
  declare_packed_length(r, c, o.seq_len);
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
}

// AdamW and its schedule.
void declare_optimizer(Registry& r, CLI::App* c, TrainOptions& o) {
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
  r.add(c, "--offload-optimizer", o.offload_optimizer, std::string(),
        "where the AdamW moments live (this rank's share under --zero): a directory on a local disk "
        "(a private file there, mapped, removed at exit) or numa:N (NUMA node N's memory); the update "
        "streams them through 16 MiB at a time, reading ahead and writing back; the same bits as in "
        "memory (empty = in memory)");
  r.add(c, "--offload-master-weights", o.offload_master, false,
        "with --offload-optimizer and --precision bf16: the fp32 master weights live on that tier too, "
        "walked in chunks by the update and by the refresh of the bf16 copy the products read (which "
        "stays in memory); --zero 0 only (ZeRO's sharding holds less anyway); the same bits as in memory");
}

// Checkpoints, resume, stopping and failing safely.
void declare_operations(Registry& r, CLI::App* c, TrainOptions& o) {
  r.add(c, "--progress-every", o.progress_every, 30.0,
        "inside a long step or start-up, at most one progress line (where it is: layer, phase) "
        "per this many seconds since the last line; 0 = none")
      ->check(nonnegative());
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
}

// The layout: dp, cp, tp, sequence parallelism, ZeRO and the cp attention
// (app/cli/parallel_options.cpp reads them into the run's ParallelPlan).
void declare_parallel(Registry& r, CLI::App* c, TrainOptions& o) {
  r.add(c, "--dp", o.dp, int64_t(0), "data-parallel degree (0 = world size / (cp x tp))")
      ->check(count(0));
  r.add(c, "--cp", o.cp, int64_t(1), "context-parallel degree: ranks that split each sequence")
      ->check(count(1));
  r.add(c, "--tp", o.tp, int64_t(1),
        "tensor-parallel degree (Megatron): ranks of one node that split every layer's heads, "
        "KV heads and SwiGLU width and the vocabulary, seeing the same tokens; one all-reduce "
        "after o_proj and down_proj forward, one after the q/k/v and gate/up input gradients "
        "backward. The heads, KV heads, intermediate size and vocabulary must be divisible by it")
      ->check(count(1));
  r.add(c, "--tp-sequence-parallel", o.tp_sequence_parallel, false,
        "with --tp: Megatron's sequence parallelism, the residual stream, norms and their "
        "activations split by tokens over the tp ranks; each all-reduce becomes a reduce-scatter "
        "and an all-gather (the same bytes, 1/tp of those activations). The tokens of a "
        "micro-batch (--batch-size x --seq-len / cp) must be divisible by tp");
  r.add(c, "--zero", o.zero, int64_t(0),
        "sharded data parallelism over the dp x cp ranks (ZeRO stage): 0 = every rank holds "
        "everything; 1 = each rank keeps and updates 1/world of the AdamW moments, then the ranks "
        "all-gather the parameters (the same bits as 0); 2 = as 1, with the gradients "
        "reduce-scattered instead of all-reduced; 3 (FSDP, fp32) = each rank keeps 1/world of the "
        "parameters and gradients too, each layer all-gathered just before use and its gradients "
        "reduce-scattered just after. One rank: nothing to shard, the same as 0")
      ->check(CLI::IsMember(zero_stages()));
  r.add_choice(c, "--grad-reduce", o.grad_reduce, GradReduce::Hierarchical, grad_reduce_choices(),
               "how the gradient all-reduce over the dp x cp ranks runs: hierarchical (where those ranks sit "
               "on several nodes with several on each: a reduce-scatter inside each node, an all-reduce of "
               "each rank's part across the nodes, an all-gather inside the node, so that a node's link "
               "carries its gradients once instead of once per rank's ring edge; elsewhere flat) or flat "
               "(one all-reduce over them all)");
  r.add_choice(c, "--balance", o.balance, Balance::Cost, balance_choices(),
               "where each micro-batch's tokens go on the dp x cp ranks: cost (by attention work: the "
               "step's documents placed so that every rank's queries see about as many keys, a long "
               "document spread over several ranks with a ring carrying its keys, the same tokens and "
               "losses as none up to rounding; with --cp-algo ring, else as none) or none (dp rank d "
               "takes its own sequences, each cut over the cp ranks by --cp-split)");
  declare_cp_attention(r, c, o.cp_attention);
}

void declare_train(Registry& r, CLI::App* c, TrainOptions& o) {
  declare_train_inputs(r, c, o);
  declare_optimizer(r, c, o);
  r.add_choice(c, "--checkpointing", o.checkpointing, Checkpointing::None, checkpointing_choices(),
               "activation checkpointing: none, attention (recompute attention), full (keep layer inputs)");
  r.add(c, "--offload-activations", o.offload_activations, std::string(),
        "where the activations kept for the backward pass wait, all but the last 3 layers' (what "
        "--checkpointing keeps): a directory on a local disk (a private file there, removed at exit) "
        "or numa:N (NUMA node N's memory); an I/O thread saves each layer's during the forward pass "
        "and loads them back ahead of the backward pass; the same bits as in memory (empty = in memory)");
  r.add(c, "--offload-layers", o.offload_layers, int64_t(-1),
        "with --offload-activations: only the first N layers' activations go to the tier, the later "
        "layers' stay in memory (lctrain plan chooses N by the tier's bandwidth and the memory left); "
        "-1 = all but the last 3")
      ->check(CLI::Range(int64_t(-1), INT64_MAX));
  r.add(c, "--mlp-tile", o.mlp_tile, int64_t(0),
        "run each layer's MLP over tiles of this many tokens (ALST's tiled MLP): no [tokens, intermediate] "
        "array is kept or made whole, the gate and up products are made again per tile in the backward "
        "pass (2/9 more MLP work), and the MLP's memory stops growing with --seq-len; equal to the untiled "
        "run to rounding (0 = untiled)")
      ->check(count(0));
  r.add_choice(c, "--attention-kernel", o.attention_kernel, std::optional<AttnKernel>(),
               attention_kernel_auto_choices(),
               "the attention path: fused (the ISA's micro-kernels, softmax in registers), onednn (the tile "
               "path: a matrix product per tile, oneDNN's, or lctrain's on AMX in bf16) or auto (a resume takes its "
               "checkpoint's; otherwise both are timed on a forward and backward of this rank's shape at "
               "start-up and the faster trains); recorded in every checkpoint");
  declare_flash_blocks(r, c, o.block_q, o.block_k);
  r.add(c, "--seed", o.seed, int64_t(1), "data order seed")
      ->check(count(0));
  declare_operations(r, c, o);
  declare_parallel(r, c, o);
  r.add_choice(c, "--precision", o.precision, Precision::Fp32, precision_choices(),
               "matrix products: fp32, or bf16 (bf16 weights copy, activations and ring K/V, gradient "
               "communication; fp32 master weights, optimizer, norms, softmax statistics, loss and "
               "accumulation)");
  r.add(c, "--eval-every", o.eval_every, int64_t(0),
        "every N steps and at the last, evaluate the model as lctrain eval does (loss, next "
        "token, passkey retrieval) on --eval-data into the timing table (0 = never)")
      ->check(count(0));
  r.add(c, "--eval-data", o.eval_data, std::string(),
        "held-out dataset file (lctrain prepare) for --eval-every, packed at --seq-len");
  r.add(c, "--eval-sequences", o.eval_sequences, int64_t(16),
        "--eval-every evaluates the first K packed sequences of --eval-data")
      ->check(count(1));
  r.add(c, "--until-retrieval", o.until_retrieval, 0.0,
        "end the run at the first --eval-every evaluation whose passkey retrieval reaches this "
        "share (final checkpoint, timing table, exit 0): a curriculum stage that advances once "
        "learnt (0 = never)")
      ->check(number(false, 0, false, 1, false));
  r.add(c, "--dry-run", o.dry_run, false,
        "check everything and print the start-up table and memory estimate, then stop");
}

void declare_eval(Registry& r, CLI::App* c, EvalOptions& o) {
  r.add(c, "--model", o.model, std::string(), "model file or checkpoint")->required();
  r.add(c, "--data", o.data, std::string(), "dataset file")->required();
  declare_packed_length(r, c, o.seq_len);
  r.add(c, "--batch-size", o.batch_size, int64_t(1), "sequences per forward pass")
      ->check(count(1));
  r.add(c, "--max-sequences", o.max_sequences, int64_t(0), "evaluate only the first N sequences (0 = all)")
      ->check(count(0));
  r.add(c, "--dp", o.dp, int64_t(1),
        "data-parallel degree: replicas that share the sequences, each evaluating its part "
        "(0 = world size / cp); dp x cp must be the world size")
      ->check(count(0));
  r.add(c, "--cp", o.cp, int64_t(1),
        "context-parallel degree: every sequence split over this many ranks, attention as in "
        "train (--cp-algo), for lengths one rank cannot hold")
      ->check(count(1));
  declare_cp_attention(r, c, o.cp_attention);
  r.add(c, "--out", o.out, std::string(), "also write the results to this HDF5 file")
      ->check(output_path("file"));
  r.add_choice(c, "--precision", o.precision, Precision::Fp32, precision_choices(),
               "matrix products: fp32 or bf16 (as in train)");
  declare_flash_blocks(r, c, o.block_q, o.block_k);
  r.add(c, "--progress-every", o.progress_every, 10.0,
        "seconds between progress lines (sequences done, rate, time left); 0 = none")
      ->check(nonnegative());
  r.add(c, "--comm-timeout", o.comm_timeout, 600.0,
        "abort the job when a rank waits this many seconds in one communication call (0 = never)")
      ->check(nonnegative());
  r.add(c, "--force", o.force, false, "replace --out if it exists");
}

void declare_bench(Registry& r, CLI::App* c, BenchOptions& o) {
  r.add_choice(c, "what", o.what, BenchWhat::Attention, bench_choices(),
               "what to measure: attention (kernel vs the peak and the GEMM library), gemm (a training "
               "step's matrix products, oneDNN vs OpenBLAS), ring (permute bandwidth, attention per step) "
               "or peak (the peak probe for --seconds: how steadily these cores deliver it)");
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
  declare_flash_blocks(r, c, o.block_q, o.block_k);
  r.add(c, "--causal", o.causal, true, "causal mask (FLOPs halved)");
  r.add(c, "--backward", o.backward, true, "also time forward+backward");
  r.add_choice(c, "--attention-kernel", o.attention_kernel, AttnKernel::Fused, attention_kernel_choices(),
               "attention: the fused kernel (the ISA's micro-kernels, softmax in registers) or the tile path "
               "(a matrix product per tile, oneDNN's, or lctrain's on AMX in bf16), softmax between them");
  r.add_choice(c, "--precision", o.precision, Precision::Fp32, precision_choices(),
               "attention and gemm: fp32 or bf16 inputs and products (%peak against that precision's peak)");
  r.add(c, "--seconds", o.seconds, 30.0, "peak: how long to run the probe, in windows of about 20 ms")
      ->check(number(false, 0.1, false, 86400));
  r.add(c, "--sizes", o.sizes, std::string("4,64,1024,4096,16384,65536"),
        "ring: message sizes in KiB, comma-separated");
  r.add(c, "--out", o.out, std::string(), "write the table to this HDF5 file")
      ->check(output_path("file"));
  r.add(c, "--force", o.force, false, "replace --out if it exists");
}

void declare_plan(Registry& r, CLI::App* c, PlanOptions& o) {
  r.add(c, "--model", o.model, std::string(), "model file or checkpoint (its configuration; default: --preset)");
  r.add(c, "--preset", o.preset, std::string("30m"), "model preset, when no --model is given");
  // Caps far above any job: they keep the search (divisors of these counts) short and its
  // products exact.
  r.add(c, "--seq-len", o.seq_len, int64_t(32768), "tokens per sequence")
      ->check(number(true, 2, false, double(INT32_MAX)));
  r.add(c, "--global-batch", o.global_batch, int64_t(1), "sequences per optimizer step (all ranks)")
      ->check(number(true, 1, false, 1e9));
  r.add(c, "--nodes", o.nodes, int64_t(1), "nodes of the job")
      ->check(number(true, 1, false, 1e6));
  r.add(c, "--cores-per-node", o.cores_per_node, int64_t(0),
        "cores of a node the job uses (0 = this rank's threads: the machine plan runs on)")
      ->check(number(true, 0, false, 1e5));
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
  r.add(c, "--offload-activations", o.offload_activations, std::string(),
        "a tier the activations may wait on (a local disk's directory, or numa:N), as train takes it: "
        "a layout that does not fit in memory moves its first layers' activations there, as few as "
        "fit, their moves costed at the tier's rate (empty = no tier)");
  r.add(c, "--tier-gbs", o.tier_gbs, 0.0,
        "GB/s that --offload-activations' tier moves per node, each way (0 = measured here: 256 MiB "
        "written and read back the way train moves them)")
      ->check(nonnegative());
  r.add(c, "--mlp-tile", o.mlp_tile, std::string("0"),
        "--mlp-tile values to consider (tokens per MLP tile, 0 = untiled), comma-separated");
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
  r.add_choice(c, "--dtype", o.dtype, Precision::Fp32, precision_choices(),
               "--to-hf: dtype of the safetensors weights: fp32 (exact) or bf16 (rounded to nearest even)");
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

// train's options that belong together: --min-lr below --lr; --eval-every with --eval-data.
std::string train_rule(const TrainOptions& o) {
  if (o.min_lr > o.lr)
    return cat("--min-lr ", o.min_lr, " is above --lr ", o.lr,
               ": the cosine decay goes from --lr down to --min-lr; lower --min-lr");
  if ((o.eval_every > 0) != !o.eval_data.empty())
    return "--eval-every N evaluates on --eval-data FILE: give both, or neither";
  if (o.until_retrieval > 0 && o.eval_every == 0)
    return cat("--until-retrieval ", o.until_retrieval, " is judged by the --eval-every evaluations: ",
               "give --eval-every N and --eval-data FILE (passkey or recall data)");
  return "";
}

// prepare's tokenizer options belong together: a tokenizer to train takes a vocabulary size,
// an existing model or the byte tokenizer none; passkey data is byte-tokenized.
std::string prepare_rule(const PrepareOptions& o) {
  const bool train = o.tokenizer != TokenizerKind::Byte, given = !o.tokenizer_model.empty();
  const std::string& tokenizer = name_of(tokenizer_choices(), o.tokenizer);
  if (o.synthetic != SyntheticData::None && (train || given))
    return cat("--synthetic ", name_of(synthetic_choices(), o.synthetic), " generates byte-tokenized documents (its answers are byte ",
               "positions): drop --tokenizer and --tokenizer-model");
  if (given && train)
    return cat("--tokenizer-model ", o.tokenizer_model, " is the tokenizer (its type is in the model): ",
               "drop --tokenizer ", tokenizer, ", or drop --tokenizer-model to train a new one");
  if (given && o.vocab_size)
    return "--vocab-size is the model's own with --tokenizer-model: drop --vocab-size";
  if (!train && o.vocab_size)
    return "the byte tokenizer's vocabulary is fixed (259 ids): drop --vocab-size, or train a "
           "SentencePiece model with --tokenizer bpe or unigram";
  if (train && !o.vocab_size)
    return cat("--tokenizer ", tokenizer, " trains a model of --vocab-size pieces: give it (e.g. ",
               "--vocab-size 8000)");
  if (train && o.vocab_size < kSentencePieceReserved + 1)
    return cat("--vocab-size ", o.vocab_size, " is too small: byte fallback takes 256 pieces and ",
               "unk, BOS, EOS and PAD 4 more; give at least ", kSentencePieceReserved + 1);
  return "";
}

}  // namespace lct::cli_detail
