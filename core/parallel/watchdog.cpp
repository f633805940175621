#include "parallel/watchdog.hpp"

#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "common/knobs.hpp"
#include "common/error.hpp"
#include "sys/stop.hpp"

namespace lct {

namespace {
struct State {
  std::mutex m;
  std::condition_variable cv;
  std::thread thread;
  bool running = false;
  const char* what = nullptr;  // the current wait, or null
  int peer = -1;
  double since = 0;
  std::string context;
};
State& state() {
  static State s;
  return s;
}

void watch(double comm_timeout, double deadline, int rank) {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.m);
  while (s.running) {
    s.cv.wait_for(lock, std::chrono::milliseconds(250));
    const double now = process_seconds();
    if (deadline > 0 && now > deadline) {
      std::fprintf(stderr,
                   "lctrain: rank %d: %s of %.0f s reached inside %s; exiting now "
                   "without a checkpoint (resume from the last one)\n",
                   rank, knob_name(Knob::TimeLimit).c_str(), deadline, s.context.c_str());
      std::fflush(stderr);
      ::_exit(kExitPrompt);
    }
    if (comm_timeout > 0 && s.what && now - s.since > comm_timeout) {
      char peer[48] = "";
      if (s.peer >= 0) std::snprintf(peer, sizeof peer, " from rank %d", s.peer);
      std::fprintf(stderr,
                   "lctrain: rank %d: hung: waited %.0f s on %s%s during %s (%s "
                   "%.0f s); aborting the job\n",
                   rank, now - s.since, s.what, peer, s.context.c_str(), knob_name(Knob::CommTimeout).c_str(), comm_timeout);
      std::fflush(stderr);
      // Let the other blocked ranks' watchdogs print their own wait before the abort.
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::seconds(2));
      MPI_Abort(MPI_COMM_WORLD, kExitAborted);
      ::_exit(kExitAborted);
    }
  }
}
}  // namespace

WaitScope::WaitScope(const char* what, int peer) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.m);
  outer_what_ = s.what;
  outer_peer_ = s.peer;
  outer_since_ = s.since;
  s.what = what;
  s.peer = peer;
  s.since = process_seconds();
}

WaitScope::~WaitScope() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.m);
  s.what = outer_what_;
  s.peer = outer_peer_;
  s.since = outer_since_;
}

void watchdog_set_context(const std::string& context) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.m);
  s.context = context;
}

void watchdog_start(double comm_timeout, double deadline, int world_rank) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.m);
  if (s.running || (comm_timeout <= 0 && deadline <= 0)) return;
  s.running = true;
  if (s.context.empty()) s.context = "start-up";
  s.thread = std::thread(watch, comm_timeout, deadline, world_rank);
}

void watchdog_stop() {
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.m);
    if (!s.running) return;
    s.running = false;
  }
  s.cv.notify_all();
  s.thread.join();
}

}  // namespace lct
