// The step loop of lctrain train: each step builds its micro-batches, trains, gathers every
// rank's figures, and then, decided alike on every rank from those figures, checkpoints,
// records, prints and stops.
#pragma once
#include <string>

#include "app/context.hpp"
#include "app/curriculum.hpp"
#include "app/train_record.hpp"
#include "io/checkpoint.hpp"
#include "io/run_dir.hpp"
#include "model/attention_op.hpp"
#include "parallel/mesh.hpp"
#include "parallel/reducer.hpp"
#include "train/evaluate.hpp"
#include "train/trainer.hpp"

namespace lct {

struct TrainLoop {
  Context& ctx;
  const TrainOptions& o;
  const ModelConfig& mc;
  TokenSource& dataset;  // its tokens read a batch at a time
  const Mesh& mesh;
  RunDirectory* run_dir;  // rank 0's, null elsewhere
  LlamaModel& model;
  Trainer& trainer;
  MpiStepReducer& reducer;
  const SeqLenSchedule& schedule;  // the length of every step
  StagedData& data;                // the loader of the current stage
  TrainState& state;
  TrainRecord& record;
  RunLayout layout;
  RankState where;
  Provenance prov;
  double peak;
  std::string peak_how;
  const AttentionOp* cp_attention;
  TokenSource* eval_data;  // --eval-data (read a batch at a time); null without --eval-every
  const ParamLayout& whole_layout;  // the model file's (model.layout() is a tp rank's slices)

  // Trains from state.step + 1 to --steps: kExitOk, or kExitRequeue after a stop request
  // (signal, --time-limit, --stop-at) with its checkpoint written. Throws AgreedError.
  int train();

  // The loop's own; the rest above is what it works with.
  std::vector<Batch> micro_batches(int64_t step, double* visible_pairs);
  RankFigures gather_figures(const PhaseClock& clock, int64_t step);
  double bytes_sent() const;  // by this rank so far: cp attention, gradient reduction, ZeRO-3
  EvalResult evaluate_held_out();
  void checkpoint();
  void write_timing();
  std::string stop_reason(const RankFigures& ranks, int64_t step) const;

  double peer_wait_s() const;  // of this rank's cp exchanges so far (RingTransport::peer_wait_s)
  double bytes_before_ = 0, peer_wait_before_ = 0, slowest_step_ = 0, last_io_ = 0, last_timing_write_ = 0, last_eval_ = 0;
};

}  // namespace lct
