// Checkpoints: the model-file schema (so a checkpoint is accepted wherever a model file is)
// plus the AdamW moments under /optimizer/exp_avg/NAME and /optimizer/exp_avg_sq/NAME (the
// names torch.optim uses), the training state and run layout as attributes of /train_state,
// and one row per rank in /ranks/state.
//
// With several ranks the file is written once, collectively, with parallel HDF5: each rank
// writes what it owns of every tensor (CheckpointParts: its ZeRO ranges, its tp slices) as
// hyperslabs of the full-shape datasets, replicated data once, each rank's own row by that
// rank. It appears under its final name only once complete and flushed (temporary name,
// fsync, rename).
#pragma once
#include <mpi.h>

#include <optional>
#include <string>

#include "common/provenance.hpp"
#include "model/params.hpp"
#include "model/tp.hpp"
#include "parallel/parallel_plan.hpp"
#include "train/state.hpp"

namespace lct {

// How a run was laid out. A resume keeps seq_len and seq_len_schedule (the data position
// counts sequences of the step's length); the degrees and the batch shape may change (checkpoints hold every tensor
// whole), bit-exactly only when all of them stay.
struct RunLayout {
  int64_t world_size = 1;
  ParallelPlan plan;             // the checkpoint records its dp and cp
  int64_t seq_len = 0, batch_size = 1, grad_accum = 1;
  std::string seq_len_schedule;  // the stages before seq_len ("" = none; app/training/curriculum.hpp)
  int64_t sequences_per_step() const { return plan.dp * batch_size * grad_accum; }
  bool operator==(const RunLayout& o) const {
    return world_size == o.world_size && plan.dp == o.plan.dp && plan.cp == o.plan.cp && seq_len == o.seq_len &&
           batch_size == o.batch_size && grad_accum == o.grad_accum &&
           seq_len_schedule == o.seq_len_schedule;
  }
};

// One rank's own state: its mesh coordinates and where its data loader stands.
struct RankState {
  int64_t dp_rank = 0, cp_rank = 0, data_epoch = 0, data_cursor = 0;
};

// What one rank writes of one array: `ranges` of the rank's layout (ascending), held back to
// back at `data` (a ZeRO-3 shard: its pieces; ZeRO-1/2 moments: one range; a replica that
// writes: the whole layout; one that does not: none).
struct ArrayPart {
  const float* data = nullptr;
  std::vector<Shard> ranges;
};

// A rank's own share of the checkpoint, written where it belongs in the whole tensors: the
// ranges of its layout `local` (its tp slices; the whole layout without tp), each mapped to
// blocks of the whole tensor (tp_blocks). Tensors replicated over tp (the norms) are written
// by tp rank 0 only. Between them the ranks must cover every tensor, each entry once.
struct CheckpointParts {
  const ParamLayout* local;
  TpSplit tp;
  ArrayPart params, exp_avg, exp_avg_sq;
  const float* held;  // every parameter this rank holds (written or not): checked finite
  size_t held_size;
};

struct CheckpointView {  // what to write; pointers into the live buffers
  const ModelConfig* config;
  const ParamLayout* layout;
  // Whole arrays (layout->total floats; rank 0's are written) ...
  const float* params;
  const float* exp_avg;
  const float* exp_avg_sq;
  TrainState state;
  RunLayout run;
  RankState rank;
  // ... or, when set, each rank's own parts instead (params .. exp_avg_sq unused).
  const CheckpointParts* parts = nullptr;
};

// Collective over `comm` (every rank calls it, with its own `rank` state). Throws on every
// rank when any part fails, a full disk included (rank 0's message names the cause); the
// previous file of that name, if any, is untouched then, and no temporary file remains.
void write_checkpoint(const std::string& path, const CheckpointView& c, const Provenance& prov,
                      MPI_Comm comm);

// Bytes a checkpoint of `layout` takes on disk, roughly (for a free-space check).
double checkpoint_bytes(const ParamLayout& layout);

// What one rank reads of one array: the read-side twin of ArrayPart (`ranges` of the rank's
// layout, ascending, read back to back into `data`).
struct ArrayTarget {
  float* data = nullptr;
  std::vector<Shard> ranges;
};

// A rank's own share of a checkpoint, read straight out of the whole tensors into the buffers
// that keep it: the same blocks the writers place (tp_blocks of its `ranges` of `local`), so
// a rank never holds a whole tensor it does not keep. Unlike the write, every rank reads all
// it keeps: the norms on every tp rank, replicated arrays (ZeRO 0 moments, parameters below
// stage 3) on every replica. Which blocks are read depends on the reading run's layout
// alone: the file holds full shapes, whatever degrees wrote it.
struct CheckpointTargets {
  const ParamLayout* local;
  TpSplit tp;
  ArrayTarget params, exp_avg, exp_avg_sq;
};

struct CheckpointBuffers {  // each of layout.total floats: everything, whole
  float* params;
  float* exp_avg;
  float* exp_avg_sq;
};

// Verifies kind, format version, config (equal to `expected`), shapes, checksums (of the
// chunks read), the sequence length (equal to `run`'s) and, when the run is laid out as the
// checkpoint was, this rank's row (`rank`'s mesh coordinates), and reads this rank's `out`
// (independently: each rank opens the file for itself; what it reads is checked finite).
// Returns the training state; *saved receives the layout the checkpoint was written with.
// `layout` is the whole (file) layout.
TrainState read_checkpoint(const std::string& path, const ModelConfig& expected,
                           const ParamLayout& layout, const CheckpointTargets& out,
                           const RunLayout& run, int world_rank, const RankState& rank,
                           RunLayout* saved);
// The same, every tensor whole into `out`.
TrainState read_checkpoint(const std::string& path, const ModelConfig& expected,
                           const ParamLayout& layout, const CheckpointBuffers& out,
                           const RunLayout& run, int world_rank, const RankState& rank,
                           RunLayout* saved);

// What --dry-run checks of a checkpoint a resume would take, reading attributes only: the
// kind, the model config, the sequence length and the schedule (read_checkpoint's checks
// before it reads any tensor). Throws as read_checkpoint would; fills *saved.
TrainState check_checkpoint_resumes(const std::string& path, const ModelConfig& expected, const RunLayout& run,
                                    RunLayout* saved);

// The training state a checkpoint records (step, lineage, data, origin), without reading
// its tensors; nullopt for a model file (or any file that is not a checkpoint).
std::optional<TrainState> read_checkpoint_state(const std::string& path);

// A checkpoint's AdamW moments: this rank's parts of them (out.exp_avg, out.exp_avg_sq; its
// params target is ignored), checked (shapes, checksums, finite) as read_checkpoint checks
// them; its run layout and ranks are not compared: a new run starts from them
// (train --init-moments).
void read_checkpoint_moments(const std::string& path, const ParamLayout& layout,
                             const CheckpointTargets& out);
// The same, whole (each layout.total floats).
void read_checkpoint_moments(const std::string& path, const ParamLayout& layout, float* exp_avg,
                             float* exp_avg_sq);

}  // namespace lct
