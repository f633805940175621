// The step loop of lctrain train: each step builds its micro-batches, trains, gathers every
// rank's figures, and then, decided alike on every rank from those figures, checkpoints,
// records, prints and stops.
#pragma once
#include <string>

#include "app/cli/context.hpp"
#include "app/training/curriculum.hpp"
#include "app/training/step_progress.hpp"
#include "app/training/step_start_save.hpp"
#include "app/training/train_parts.hpp"
#include "app/training/train_record.hpp"
#include "io/checkpoint.hpp"
#include "io/run_dir.hpp"
#include "model/attention_op.hpp"
#include "model/balance.hpp"
#include "parallel/mesh.hpp"
#include "parallel/reducer.hpp"
#include "train/evaluate.hpp"
#include "train/trainer.hpp"

namespace lct {

struct TrainLoop {
  Context& ctx;
  const TrainOptions& o;
  const ModelConfig& mc;
  const Mesh& mesh;
  TrainParts& parts;  // the model, its trainer and reducer, the cp attention (train_parts.hpp)
  // The data.
  TokenSource& dataset;            // its tokens read a batch at a time
  const SeqLenSchedule& schedule;  // the length of every step
  StagedData& data;                // the loader of the current stage
  TokenSource* eval_data;          // --eval-data (read a batch at a time); null without --eval-every
  // The books: where the run stands, what it records, and where it writes.
  TrainState& state;
  TrainRecord& record;
  RunDirectory* run_dir;  // rank 0's, null elsewhere
  RunLayout layout;
  RankState where;
  Provenance prov;
  double peak;
  std::string peak_how;
  Precision precision;  // of the products: which probed peak the MFU is of
  const ParamLayout& whole_layout;  // the model file's (the model's is a tp rank's slices)
  StepProgress& progress;           // rank 0's lines inside long steps

  // Trains from state.step + 1 to --steps: kExitOk, or kExitRequeue after a stop request
  // (signal, --time-limit, --stop-at) with its checkpoint written. Throws AgreedError.
  int train();

  // The loop's own; the rest above is what it works with.
  enum class Outcome { Continue, Learnt, Stopped };  // Learnt: --until-retrieval reached
  struct Pace {
    int64_t first_step;  // of this run (after a resume: the checkpoint's step + 1)
    double start;        // omp_get_wtime() at its start, for the time left
  };
  Outcome step(int64_t step, const Pace& pace, PhaseClock& clock);
  int finish();
  void reprobe_peak(const std::string& why);
  void probe_again_if_beaten(const RankFigures& ranks, int64_t step);
  void announce_stage(int64_t step, int64_t first_step);
  void checkpoint_into(PhaseClock& clock);  // checkpoint(), timed as the step's IO
  std::string evaluate_if_due(int64_t step, bool stop, StepFigures& fig);
  void check_skips(int64_t step);
  // What a step's micro-batches hold for this rank: its queries' visible pairs and, placed by
  // work (--balance cost), every rank's under --balance none and the micro-batches spread.
  struct StepWork {
    double pairs = 0;
    std::vector<double> baseline_pairs;
    int64_t spread = 0;
  };
  std::vector<Batch> micro_batches(int64_t step, StepWork& work);
  Batch balanced_share(const Batch& full, CpSplit split, StepWork& work) const;
  WorkModel work_model() const;
  RankFigures gather_figures(const PhaseClock& clock, int64_t step, double work_flops);
  double bytes_sent() const;  // by this rank so far: cp attention, gradient reduction, ZeRO-3
  EvalResult evaluate_held_out();
  void checkpoint();  // of the step just taken, over the world, with its line
  std::string write_checkpoint_of(const World& w, const TrainState& st);  // returns its path
  void write_timing(const World& w);
  void write_timing() { write_timing(ctx.world); }
  std::string stop_reason(const RankFigures& ranks, int64_t step) const;

  double peer_wait_s() const;  // of this rank's cp exchanges so far (RingTransport::peer_wait_s)
  double steal_in_step(const PhaseClock& clock) const;
  StepStartSave* saver_ = nullptr;  // while train() runs
  double bytes_before_ = 0, peer_wait_before_ = 0, slowest_step_ = 0, last_io_ = 0, last_timing_write_ = 0, last_eval_ = 0;
  double steal_at_start_ = 0;  // stolen_seconds of the rank's CPUs when the step began
  bool steal_injected_ = false;  // LCT_INJECT_FAULT=steal on this rank
  bool probed_again_ = false;  // the peak, by a step that beat it (probe_again_if_beaten)
};

}  // namespace lct
