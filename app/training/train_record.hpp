// The training run's record: one timing-table row per step (plus one value per rank for the
// per-rank columns), the timestamped step line printed by rank 0, and the verification and figure of
// merit at the end. A resumed run continues the table it finds, tagging its rows with the
// restart count; a step repeated after a restart appears once per run that took it.
#pragma once
#include <cmath>
#include <iosfwd>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "io/timing_file.hpp"
#include "train/evaluate.hpp"
#include "train/trainer.hpp"

namespace lct {

// What every rank measured in a step, gathered on every rank.
struct RankFigures {
  // One rank's values, in this order; the first six are the per-rank timing columns.
  enum Slot : int {
    kSeconds, kAttention, kComm, kAllreduce, kBytesSent,
    kPeerWait,          // of kComm, the part spent waiting for a slower rank
    kWork,              // model FLOPs of this rank's share of the step, as its documents predict
    kSteal,             // seconds a hypervisor ran other work on this rank's CPUs, mean over them (sys/steal.hpp)
    kStopFlag,          // this rank asks to stop at this step boundary
    kSinceTimingWrite,  // seconds since the timing table was last written
    kCount
  };
  std::vector<double> all;          // [ranks * kCount]
  int ranks = 1;
  const double* rank(int r) const { return &all[size_t(kCount * r)]; }
  bool any_stop() const;            // some rank asks to stop at this step boundary
  double mean_share(Slot s) const;  // mean over ranks of slot s / seconds
  double exposed_comm_frac() const { return mean_share(kComm); }
  double peer_wait_frac() const { return mean_share(kPeerWait); }  // the peer-wait part of comm
  double imbalance() const;         // max / mean busy time (seconds - comm - allreduce)
  double predicted_imbalance() const;  // max / mean kWork: what the documents alone would give
  double mean_work() const;            // mean kWork: the model FLOPs of a rank's share
  double steal_frac() const { return mean_share(kSteal); }  // NaN where not reported
};

struct StepFigures {
  StepStats stats;
  int64_t restarts = 0, steps = 0;
  double seconds = 0, gflops = 0, peak_gflops = 0;
  const PhaseClock* clock = nullptr;
  const RankFigures* ranks = nullptr;
  // The step without the checkpoint it wrote (io_s): what tokens/s, GFLOP/s and MFU are of,
  // so that a checkpointing step reads as fast as the others ("seconds" keeps the write).
  double train_seconds() const { return seconds - clock->seconds[size_t(Phase::IO)]; }
  int64_t seq_len = 0;        // of the step's sequences
  bool show_seq_len = false;  // in the step line (a --seq-len-schedule run)
  // A run placing its tokens by work (--balance cost): the predicted imbalance of --balance
  // none's placement of the same tokens; NaN in a run that does not.
  double unbalanced_imbalance = std::nan("");
  // --eval-every's figures at this step (eval_accuracy(), eval_retrieval()); NaN without one.
  double eval_loss = std::nan(""), eval_accuracy = std::nan(""), eval_retrieval = std::nan("");
};

class TrainRecord {
 public:
  // `peer_wait_known`: the cp exchanges tell waiting for a slower rank from transfer (a ring
  // with shared-memory hops); the step line and figure of merit then show both.
  TrainRecord(int ranks, bool peer_wait_known);
  // Appends to a table read back from a previous run of this run's columns (its rank count
  // may differ: per-rank columns then widen to the larger, NaN where a row had no such
  // rank); false (and the table left as it was) when the columns do not match. `seq_len`:
  // the length of the earlier rows of a table without a seq_len column (written before
  // --seq-len-schedule existed); a table without the eval columns (before --eval-every) gets
  // them NaN.
  bool continue_from(TimingTable previous, int64_t seq_len);
  void add(const StepFigures& f);
  // This run's rows (a resumed table keeps the earlier runs' as they were) against a peak
  // re-measured at its end: their MFU becomes their GFLOP/s over it.
  void rebase_mfu(double peak_gflops);
  std::string step_line(const StepFigures& f, double eta_seconds) const;
  // Fills the summary attributes and prints the verification and figure of merit.
  void finish(std::ostream& out, int64_t dp, int64_t cp, double peak_gflops, const std::string& peak_how);
  const TimingTable& table() const { return table_; }
  size_t rows() const { return table_.rows(); }

 private:
  TimingTable table_;
  int ranks_;
  bool peer_wait_known_;
  int64_t width_;  // of the per-rank columns: ranks_, or more after a resume from more ranks
};

// "[2026-11-22 22:36:03] eval at step 200: loss 1.2340, next token 45.6%, passkeys 12/16
// (75.0%)": rank 0's line after an --eval-every evaluation (no passkeys part without them).
std::string eval_line(int64_t step, const EvalResult& r);
// The timing table's eval_accuracy (share of targets predicted) and eval_retrieval (share of
// passkeys retrieved exactly; NaN when none were asked) of an evaluation.
double eval_accuracy(const EvalResult& r);
double eval_retrieval(const EvalResult& r);

// "[2026-11-22 22:36:03] checkpoint RUN/checkpoints/step_00000200.h5: 35.7 MiB in 0.09 s
// (385 MiB/s)": rank 0's line after a checkpoint write that took `seconds`.
std::string checkpoint_line(const std::string& path, double seconds);

}  // namespace lct
