// No silent hangs. Code about to block in communication opens a WaitScope naming what it
// waits for; a watchdog thread aborts the whole job (MPI_Abort, exit kExitAborted) when one
// wait outlasts --comm-timeout, after printing what this rank was waiting on. Every rank
// runs its own watchdog, so each blocked rank reports its own wait. The same thread
// enforces the hard deadline of --time-limit: past it the process exits with kExitPrompt.
#pragma once
#include <string>

namespace lct {

// Scopes nest: an inner wait (a broadcast inside a checkpoint write) is watched on its own
// clock, and on leaving it the outer wait is watched again from where it started. Each
// thread's scopes are its own: a stop's writer waits beside the step's thread.
class WaitScope {
 public:
  explicit WaitScope(const char* what, int peer = -1);  // peer: world rank waited on, if one
  ~WaitScope();
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;

 private:
  const char* outer_what_;
  int outer_peer_;
  double outer_since_;
};

// What the process is doing, for the watchdog's message ("step 12").
void watchdog_set_context(const std::string& context);

// Starts the thread (idempotent). comm_timeout <= 0: no communication limit;
// deadline <= 0: no deadline (seconds since process start).
void watchdog_start(double comm_timeout, double deadline, int world_rank);
void watchdog_stop();

// watchdog_start for the life of a subcommand: stopped on every way out (returns, throws).
struct WatchdogRun {
  WatchdogRun(double comm_timeout, double deadline, int world_rank) {
    watchdog_start(comm_timeout, deadline, world_rank);
  }
  ~WatchdogRun() { watchdog_stop(); }
  WatchdogRun(const WatchdogRun&) = delete;
  WatchdogRun& operator=(const WatchdogRun&) = delete;
};

}  // namespace lct
