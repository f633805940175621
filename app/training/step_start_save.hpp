// A stop that does not wait for the step to end. A launcher sent SIGTERM or SIGINT passes it
// on and kills the ranks soon after (Open MPI's mpirun: 1 s; Slurm: KillWait, 30 s), and a
// step at long context takes longer. The weights and AdamW moments move only at the step's
// update, so the state the step started from is still in memory while it runs: on SIGTERM or
// SIGINT during a step, a writer thread on every rank writes that state as the checkpoint of
// the previous step, on a communicator of its own beside the step's collectives, and the
// process exits with kExitRequeue, the step's work dropped.
//
// A rank the signal did not reach joins at the step's gate (Trainer::set_before_update, before
// the gradients are reduced), where every rank says whether it stops: a signal seen by some
// ranks only still stops all of them on the same state. SIGUSR1, --time-limit and --stop-at
// keep stopping at the step's end (they leave time for it). Needs MPI_THREAD_MULTIPLE; without
// it every stop waits for the step's end.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "parallel/world.hpp"

namespace lct {

// Why a rank asks to stop, as it travels in the step's figures: a signal's number, or one of
// these; 0 for none.
inline constexpr double kStopTimeLimit = 1000, kStopAt = 1001;
// "SIGTERM (signal 15) on every rank", "SIGUSR1 (signal 10) on rank 3", "--time-limit near on
// rank 0 and 1 other(s)": from every rank's reason [ranks], one rank's without "on ...".
std::string stop_reason(const std::vector<double>& why);

class StepStartSave {
 public:
  // Writes the checkpoint of the run as it stands before the step (its weights, moments and
  // state are not touched until the gate) with the data at (`data_epoch`, `data_cursor`), and
  // the timing table, collectively over `world`; returns the checkpoint's path. Throws
  // AgreedError as save_checkpoint does.
  using Writer = std::function<std::string(const World& world, int64_t data_epoch, int64_t data_cursor)>;
  // Collective over `world` (it duplicates the communicator). `steps`: --steps, for the line.
  StepStartSave(const World& world, Writer write, int64_t steps);
  ~StepStartSave();
  StepStartSave(const StepStartSave&) = delete;
  StepStartSave& operator=(const StepStartSave&) = delete;

  bool enabled() const { return enabled_; }
  // Step `step` has read its batches, which began at (`data_epoch`, `data_cursor`): from now to
  // its gate, a stop writes the run as it stood before them.
  void open(int64_t step, int64_t data_epoch, int64_t data_cursor);
  // The step's gate, on the step's thread: every rank agrees whether any stops; returns when
  // none does (later signals stop at the step's end), never when one does.
  void gate();

 private:
  enum Window : int { kClosed, kOpen, kWriting };
  void watch();
  [[noreturn]] void write_and_exit();

  const World& step_world_;  // the step's communicator, for the gate
  World world_;              // the writer's: a duplicate of it
  Writer write_;
  int64_t steps_;
  bool enabled_;
  int64_t step_ = 0, data_epoch_ = 0, data_cursor_ = 0;  // of the open window
  std::atomic<int> window_{kClosed};
  std::mutex m_;
  std::condition_variable cv_;
  std::atomic<bool> quit_{false};
  std::thread watcher_;
};

}  // namespace lct
