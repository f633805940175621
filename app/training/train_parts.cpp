#include "app/training/train_parts.hpp"

#include <algorithm>
#include <ostream>

#include "parallel/cp_attention.hpp"
#include "parallel/ulysses_attention.hpp"
#include "parallel/world.hpp"

namespace lct {

namespace {

// The start-up line of a ring (a ring's own, or a hybrid's across its Ulysses groups):
// rank 0's hops and where every rank's go. Collective over the cp group.
void print_cp_attention(std::ostream& out, const AttentionOp* op, const ParallelPlan& plan) {
  if (!op) return;
  const AttentionOp::RingReport ring = op->ring_report();
  if (ring.ranks == 0) return;
  const char* transport_option = cp_transport_name(plan.cp_transport);
  const std::string hops = op->ring_hops();
  const std::string& rank0 = ring.transport;
  if (plan.cp_algo == CpAlgo::Hybrid)
    out << "hybrid cp: Ulysses all-to-all over " << plan.ulysses_degree << " consecutive cp ranks x ring over "
        << plan.cp / plan.ulysses_degree << " (--cp-transport " << transport_option << "), rank 0: " << rank0
        << "; " << hops << "\n";
  else
    out << "ring transport (--cp-transport " << transport_option << "), rank 0: " << rank0 << "; " << hops << "\n";
}

}  // namespace

void TrainParts::take_params(const ParamLayout& whole, const float* whole_params) {
  Buffer<float> sliced(split.size > 1 ? local.total : 0);
  if (split.size > 1) tp_take_local(whole, local, split, whole_params, sliced.data());
  const float* mine = split.size > 1 ? sliced.data() : whole_params;
  if (shards) shards->take_mine(mine, shards->params());
  else std::copy(mine, mine + local.total, model->params());
}

std::vector<Shard> TrainParts::moment_ranges(const std::vector<Shard>& unsharded) const {
  return zero->splits_moments ? trainer->sync().moment_ranges() : unsharded;
}

CheckpointTargets TrainParts::checkpoint_targets() {
  const std::vector<Shard> all{{0, local.total}};
  const std::vector<Shard> moments = moment_ranges(all);
  return {&local,
          split,
          {shards ? shards->params() : model->params(), shards ? shards->pieces() : all},
          {trainer->optimizer().m(), moments},
          {trainer->optimizer().v(), moments}};
}

std::unique_ptr<TrainParts> build_train_parts(const TrainOptions& o, const ParallelPlan& plan, const Mesh& mesh,
                                              TrainInputs& in, std::ostream& out) {
  const ModelConfig& mc = in.config();
  auto p = std::make_unique<TrainParts>();
  p->cp_attention = make_cp_attention(plan, mesh.comm("cp"), mc, in.shape);
  print_cp_attention(out, p->cp_attention.get(), plan);
  p->replicas = mesh.comm_except("tp");
  if (plan.balances() && plan.dp > 1)
    p->spread_attention = make_cp_attention(plan.spread_plan(), p->replicas, mc, in.shape);
  if (plan.balances())
    out << "work balance (--balance cost): each micro-batch's tokens placed by attention work over the "
        << plan.replicas() << " dp x cp ranks; a micro-batch whose documents are spread runs on a ring over "
        << (plan.dp > 1 ? "all of them" : "the cp ranks") << "\n";
  if (const std::string note = UlyssesAttention::replication_note(
          plan.ulysses_ranks(), mc.num_attention_heads, mc.num_key_value_heads, "Ulysses");
      !note.empty())
    out << note << "\n";
  // --tp: each rank holds its slices of every tensor (model/tp.hpp), in the local layout;
  // --zero 3: the parameters and gradients live in shards of that layout, each rank keeping
  // its own piece and letting go of the model file's whole weights before anything else is
  // allocated.
  p->local = ParamLayout::llama(mc, int(plan.tp));  // tp 1: the whole layout
  p->split = TpSplit{int(plan.tp), mesh.index("tp")};
  p->replica_rank = comm_rank(p->replicas);
  p->replica_count = comm_size(p->replicas);
  p->tp_comm = std::make_unique<MpiTpComm>(mesh.comm("tp"));
  p->zero = &zero_variant(plan.zero, p->replica_count);
  if (p->zero->weights) {
    p->shards = p->zero->weights(p->replicas, p->local, mc);
    p->take_params(in.init.layout, in.init.params.data());
    in.init.params = Buffer<float>();
  }
  p->model = std::make_unique<LlamaModel>(mc, in.shape, p->cp_attention.get(), p->shards.get(),
                                          plan.tp > 1 ? p->tp_comm.get() : nullptr);
  if (plan.balances()) p->model->set_spread_attention(p->spread());
  if (!p->shards) p->take_params(in.init.layout, in.init.params.data());
  in.init.params = Buffer<float>();
  p->reducer = std::make_unique<MpiStepReducer>(p->replicas, in.precision, MpiStepReducer::kBucketFloats,
                                                plan.grad_reduce == GradReduce::Hierarchical);
  if (p->reducer->hierarchical())
    out << "gradient all-reduce (--grad-reduce hierarchical): inside each node, across the nodes between the "
        << "ranks of the same place, inside again\n";
  StepReducer* reducer = p->replica_count > 1 ? p->reducer.get() : nullptr;
  const AdamWConfig ac{o.lr, o.min_lr, o.warmup_steps, o.steps, o.beta1, o.beta2, o.eps,
                       o.weight_decay, o.decay_norms_embeddings, o.grad_clip, in.optimizer_tier};
  p->trainer = std::make_unique<Trainer>(*p->model, ac, reducer,
                                         p->zero->sync(*p->model, reducer, p->replica_count, p->replica_rank));
  return p;
}

}  // namespace lct
