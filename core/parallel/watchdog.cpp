#include "parallel/watchdog.hpp"

#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "common/knobs.hpp"
#include "common/error.hpp"
#include "sys/stop.hpp"

namespace lct {

namespace {
// One thread's current wait: the step's thread, and a stop's writer beside it
// (app/training/step_start_save.hpp), each watched on its own clock.
struct Wait {
  const char* what = nullptr;  // the current wait, or null
  int peer = -1;
  double since = 0;
};
struct State {
  std::mutex m;
  std::condition_variable cv;
  std::thread thread;
  bool running = false;
  std::vector<Wait*> waits;  // every thread's that has waited (they live as long as it does)
  std::string context;
};
State& state() {
  static State s;
  return s;
}

// The calling thread's slot, registered on its first wait, removed when it ends.
struct ThreadWait {
  Wait wait;
  ThreadWait() {
    std::lock_guard<std::mutex> lock(state().m);
    state().waits.push_back(&wait);
  }
  ~ThreadWait() {
    std::lock_guard<std::mutex> lock(state().m);
    std::erase(state().waits, &wait);
  }
};
Wait& my_wait() {
  thread_local ThreadWait t;
  return t.wait;
}

// The wait that has lasted longest, or null when no thread waits.
const Wait* longest_wait(const State& s) {
  const Wait* w = nullptr;
  for (const Wait* x : s.waits)
    if (x->what && (!w || x->since < w->since)) w = x;
  return w;
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
    const Wait* w = longest_wait(s);
    if (comm_timeout > 0 && w && now - w->since > comm_timeout) {
      char peer[48] = "";
      if (w->peer >= 0) std::snprintf(peer, sizeof peer, " from rank %d", w->peer);
      std::fprintf(stderr,
                   "lctrain: rank %d: hung: waited %.0f s on %s%s during %s (%s "
                   "%.0f s); aborting the job\n",
                   rank, now - w->since, w->what, peer, s.context.c_str(), knob_name(Knob::CommTimeout).c_str(), comm_timeout);
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
  Wait& w = my_wait();
  std::lock_guard<std::mutex> lock(state().m);
  outer_what_ = w.what;
  outer_peer_ = w.peer;
  outer_since_ = w.since;
  w.what = what;
  w.peer = peer;
  w.since = process_seconds();
}

WaitScope::~WaitScope() {
  Wait& w = my_wait();
  std::lock_guard<std::mutex> lock(state().m);
  w.what = outer_what_;
  w.peer = outer_peer_;
  w.since = outer_since_;
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
