// What lctrain train checks and decides before it allocates or writes anything.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>

#include "app/cli/cli.hpp"
#include "app/training/curriculum.hpp"
#include "data/dataset.hpp"
#include "io/run_dir.hpp"
#include "model/config.hpp"
#include "sys/tier_store.hpp"
#include "model/llama.hpp"
#include "model/shard.hpp"
#include "parallel/parallel_plan.hpp"
#include "parallel/world.hpp"

namespace lct {

std::string gib(double bytes);  // "1.25 GiB"

// Everything about the options, the plan and the inputs that can be checked on every rank
// alike. `schedule`: the run's lengths (--seq-len-schedule, then --seq-len), each checked as
// --seq-len is.
void check_inputs(const TrainOptions& o, const ParallelPlan& plan, const ModelConfig& mc,
                  const DatasetInfo& ds, const SeqLenSchedule& schedule);

// Prints the memory estimate per rank (model, optimizer, activations, the step's
// micro-batches, the cp attention's buffers) and throws when it exceeds what the rank may
// use: the node's available memory, or its cgroup's limit (Slurm --mem), shared by the
// `node_size` ranks of the node. The world size and --zero decide the ranks the AdamW moments
// are split over. `process_bytes`: what the process held before it read anything (code,
// libraries, MPI); `optimizer_tier`: where the AdamW moments live (--offload-optimizer). The
// estimate is `lctrain plan`'s too (parallel/layout_model.hpp).
void check_memory(std::ostream& out, const TrainOptions& o, const ParallelPlan& plan,
                  const ModelConfig& mc, const ModelShape& shape, const TierSpec& optimizer_tier, int threads,
                  int node_size, int world_size, double process_bytes);

// Whether this run continues the one in its run directory (--resume auto, or one of its own
// checkpoints), and the refusal of a previous run it does not continue (unless --force).
bool continues_run(const RunDirectory& run, const TrainOptions& o);
void check_previous_run(const RunDirectory& run, const TrainOptions& o);

// Rank 0 locks the run directory for the whole run, removes what killed writers left, and
// refuses a previous run in it unless this run continues it (--resume auto, or one of its
// own checkpoints) or --force sets it aside. Checks the space for a checkpoint. Agreed:
// every rank returns (null on ranks other than 0) or throws alike.
// `host` names this rank's host in the lock (Topology::host).
std::unique_ptr<RunDirectory> open_run_directory(const World& w, const TrainOptions& o,
                                                 const std::string& host, std::ostream& out,
                                                 double checkpoint_bytes);

// "'RUN/checkpoints/step_N.h5'", or "none written yet" (rank 0's view; rank 0 prints).
std::string latest_or_none(const RunDirectory* run);

}  // namespace lct
