#include "app/training/train_inputs.hpp"

#include <ostream>

#include "app/cli/rope_options.hpp"
#include "app/training/train_setup.hpp"
#include "common/error.hpp"
#include "io/checkpoint.hpp"
#include "io/dataset_file.hpp"
#include "model/activation_offload.hpp"

namespace lct {

namespace {

// Loss weights that score nothing would train on a loss of 0 with no gradient, silently:
// refused. Documents with none are legal (a mask may leave some out) but worth a line.
void check_loss_weights(TokenSource& data, const std::string& path, std::ostream& out) {
  if (!data.has_weights()) return;
  const LossWeightCount w = count_loss_weights(data);
  if (w.weighted == 0)
    throw AgreedError(cat("--data '", path, "': all ", w.targets, " loss weights of its targets are zero, ",
                          "so training would learn nothing (loss 0, no gradient); prepare it with ",
                          "--loss-on all, or give weights that score some targets"));
  if (w.documents_without > 0)
    out << "warning: --data '" << path << "': " << w.documents_without << " of " << data.info().num_docs()
        << " documents have no weighted target (their loss weights are all zero): they are read "
        << "but teach nothing\n";
}

// --eval-data must fit the model as --data must (read a batch at a time, at each evaluation).
std::unique_ptr<TokenSource> open_eval_data(const TrainOptions& o, const ModelData& init) {
  if (o.eval_every == 0) return nullptr;
  std::unique_ptr<TokenSource> eval_data = open_dataset_file(o.eval_data);
  check_fits_model(eval_data->info(), o.eval_data, init.config.vocab_size, o.model);
  check_same_tokenizer(init.tokenizer, o.model, tokenizer_info(eval_data->info()), o.eval_data);
  // Text and copy data ask for no passkeys: their retrieval is no number, never reached.
  if (o.until_retrieval > 0 && eval_data->info().passkey.empty())
    fail("--until-retrieval ", o.until_retrieval, " needs passkeys to retrieve, but --eval-data '", o.eval_data,
         "' has none (its evaluations measure loss only); give passkey or recall data, or drop --until-retrieval");
  return eval_data;
}

// --offload-master-weights: beside the moments, in bf16, with the whole master on each rank.
void check_offload_master(const TrainOptions& o, const ParallelPlan& plan) {
  if (!o.offload_master) return;
  if (o.offload_optimizer.empty())
    fail("--offload-master-weights puts the fp32 master weights on --offload-optimizer's tier, but none is given: ",
         "add --offload-optimizer DIR|numa:N");
  if (o.precision != Precision::Bf16)
    fail("--offload-master-weights needs --precision bf16: in fp32 every product reads the master weights, so ",
         "they must stay in memory");
  if (!plan.keeps_whole_master())
    fail("--offload-master-weights keeps each rank's whole master on the tier, which --zero ", o.zero,
         "'s gather of the parameters would bring back into memory every step: use --zero 0 with it, or --zero ",
         o.zero, " without it");
}

// --offload-layers names layers that can move to --offload-activations' tier.
void check_offload_layers(const TrainOptions& o, const ModelShape& shape, const ModelConfig& mc) {
  if (o.offload_layers < 0) return;
  if (!shape.offload_activations.on())
    fail("--offload-layers ", o.offload_layers, " says how many layers' activations go to --offload-activations' ",
         "tier, but no tier is given: add --offload-activations DIR|numa:N, or drop --offload-layers");
  const int64_t most = ActivationOffload::movable(mc.num_hidden_layers);
  if (o.offload_layers > most)
    fail("--offload-layers ", o.offload_layers, ": a model of ", mc.num_hidden_layers, " layers can move at most ",
         most, " (the last ", ActivationOffload::kSlots, " layers' activations stay in memory); give 0 to ", most,
         ", or -1 for all of them");
}

}  // namespace

TrainInputs read_train_inputs(const Context& ctx, const ParallelPlan& plan, std::ostream& out) {
  const TrainOptions& o = ctx.inv.train;
  TrainInputs in;
  in.init = read_model_file(o.model);
  // Offsets and attributes only: each rank reads the tokens of its own sequences, step by step.
  in.dataset = open_dataset_file(o.data);
  const DatasetInfo& ds = in.dataset->info();
  // The model's config, with the context extension's RoPE changes (--rope-*), if any.
  in.source_config = in.init.config;
  apply_rope_options(o.rope, in.init.config, "train");
  in.init.config.validate(cat("train (the model of '", o.model, "' with the --rope-* options given)"));
  in.schedule = std::make_unique<SeqLenSchedule>(o.seq_len_schedule, o.seq_len, o.steps);
  check_inputs(o, plan, in.init.config, ds, *in.schedule);
  // --dry-run can estimate a run's memory on a small sample of its data.
  if (ds.num_tokens() < o.seq_len) {
    const std::string what = cat("dataset '", o.data, "' holds ", ds.num_tokens(),
                                 " tokens, fewer than one sequence of --seq-len ", o.seq_len);
    if (!o.dry_run) fail(what, "; use a shorter --seq-len or more data");
    out << "warning: " << what << ": the real run would refuse it (--dry-run checks everything else)\n";
  }
  check_same_tokenizer(in.init.tokenizer, o.model, tokenizer_info(ds), o.data);
  check_loss_weights(*in.dataset, o.data, out);
  in.eval_data = open_eval_data(o, in.init);
  in.source = read_checkpoint_state(o.model);
  if (o.init_moments && !in.source)
    fail("--init-moments takes the AdamW moments of a checkpoint, but --model '", o.model,
         "' is a model file, which has none; give a checkpoint (RUN/checkpoints/step_N.h5), or ",
         "drop --init-moments");
  in.origin = in.source ? InitOrigin{o.model, in.source->step, in.source->run_id, in.source->data}
                        : InitOrigin{o.model, 0, "", {}};
  in.precision = o.precision;
  in.shape = ModelShape{o.batch_size * o.seq_len / plan.cp, o.seq_len, o.checkpointing,
                        {o.block_q, o.block_k}, ctx.attention_isa(in.precision), in.precision,
                        plan.sequence_parallel,
                        TierSpec::parse(o.offload_activations, "--offload-activations"), o.offload_layers,
                        o.mlp_tile};
  check_offload_layers(o, in.shape, in.init.config);
  in.optimizer_tier = TierSpec::parse(o.offload_optimizer, "--offload-optimizer");
  check_offload_master(o, plan);
  if (o.offload_master) in.shape.master_tier = in.optimizer_tier;
  return in;
}

void report_train_inputs(std::ostream& out, const TrainOptions& o, const ParallelPlan& plan,
                         const TrainInputs& in) {
  const ModelConfig& mc = in.config();
  if (const std::string changed = config_changes(in.source_config, mc); !changed.empty())
    out << "model config of '" << o.model << "' changed: " << changed << "\n";
  if (in.source)
    out << "initialised from checkpoint '" << o.model << "' (step " << in.source->step << ", run "
        << (in.source->run_id.empty() ? "unknown" : in.source->run_id) << ", trained on "
        << (in.source->data.fingerprint.empty() ? "unrecorded data" : in.source->data.describe()) << ")"
        << (o.init_moments ? " with its AdamW moments" : "") << "\n";
  if (in.schedule->staged()) out << "sequence lengths (--seq-len-schedule): " << in.schedule->describe() << "\n";
  const int64_t tp = plan.tp;
  out << "model: " << in.init.layout.num_parameters() << " parameters, " << mc.num_hidden_layers
      << " layers, hidden " << mc.hidden_size << ", heads " << mc.num_attention_heads << "/"
      << mc.num_key_value_heads << " x " << mc.head_dim()
      << (tp > 1 ? cat("; --tp ", tp, ": each rank holds ", mc.num_attention_heads / tp, "/",
                       mc.num_key_value_heads / tp, " heads, ", mc.intermediate_size / tp,
                       " of the intermediate size and ", mc.vocab_size / tp, " vocabulary rows",
                       plan.sequence_parallel
                           ? cat(", and 1/", tp, " of the residual stream's tokens (--tp-sequence-parallel)")
                           : "")
                 : std::string())
      << "\n";
}

}  // namespace lct
