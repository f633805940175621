#include "app/training/step_start_save.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iomanip>
#include <sstream>

#include "app/cli/progress.hpp"
#include "common/error.hpp"
#include "sys/stop.hpp"

namespace lct {

namespace {
// The signals a launcher follows with SIGKILL: they cannot wait for the step's end.
bool abandons_step(int sig) { return sig == SIGTERM || sig == SIGINT; }

// Rank 0's line straight to fd 1: the step's thread owns std::cout's buffer.
void say(const std::string& line) {
  const std::string text = line + "\n";
  [[maybe_unused]] const ssize_t n = ::write(1, text.data(), text.size());
}
}  // namespace

std::string stop_reason(const std::vector<double>& why) {
  int first = -1, asking = 0;
  for (size_t r = 0; r < why.size(); ++r)
    if (why[r] != 0) {
      asking += 1;
      if (first < 0) first = int(r);
    }
  if (first < 0) return "no stop";
  const double w = why[size_t(first)];
  const std::string what = w == kStopTimeLimit ? "--time-limit near"
                           : w == kStopAt       ? "--stop-at"
                                                : cat(signal_name(int(w)), " (signal ", int(w), ")");
  if (why.size() == 1) return what;
  return asking == int(why.size())
             ? what + " on every rank"
             : cat(what, " on rank ", first, asking > 1 ? cat(" and ", asking - 1, " other(s)") : "");
}

StepStartSave::StepStartSave(const World& world, Writer write, int64_t steps)
    : step_world_(world), world_(world), write_(std::move(write)), steps_(steps),
      enabled_(world.thread_level >= MPI_THREAD_MULTIPLE) {
  if (!enabled_) return;
  world_ = world_duplicate(world);
  watcher_ = std::thread([this] { watch(); });
}

StepStartSave::~StepStartSave() {
  if (!enabled_) return;
  quit_ = true;
  wake_stop_waiters();
  cv_.notify_all();
  watcher_.join();
  world_free_duplicate(world_);
}

void StepStartSave::open(int64_t step, int64_t data_epoch, int64_t data_cursor) {
  if (!enabled_) return;
  step_ = step;  // the window is closed: the watcher reads none of them
  data_epoch_ = data_epoch;
  data_cursor_ = data_cursor;
  window_.store(kOpen);
}

void StepStartSave::watch() {
  wait_for_stop_signal();
  if (quit_ || !abandons_step(stop_signal())) return;  // SIGUSR1 first: stops at the step's end
  // Between steps the window is shut until the next one opens it. Once this thread holds it,
  // it writes and ends the process; the step's thread finds it taken at the gate.
  while (!quit_) {
    int open = kOpen;
    if (window_.compare_exchange_strong(open, kWriting)) write_and_exit();
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait_for(lock, std::chrono::milliseconds(20));
  }
}

void StepStartSave::gate() {
  if (!enabled_) return;
  int was = kOpen;
  const bool writing = !window_.compare_exchange_strong(was, kClosed) && was == kWriting;
  const double mine = writing || abandons_step(stop_signal()) ? 1 : 0;
  const std::vector<double> all = allgather({mine}, step_world_.comm, "the step's stop agreement");
  if (*std::max_element(all.begin(), all.end()) == 0) return;  // a later signal stops at the step's end
  if (writing)  // this rank's writer ends the process
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  write_and_exit();
}

void StepStartSave::write_and_exit() {
  // Every rank's signal. Not watched: it waits for the ranks the signal did not reach, which
  // come from their gate, as long as the rest of their step.
  const std::vector<double> why = allgather({double(stop_signal())}, world_.comm, nullptr);
  int code = kExitRequeue;
  std::string path;
  const double t0 = process_seconds();
  try {
    path = write_(world_, data_epoch_, data_cursor_);
  } catch (const AgreedError& e) {
    if (world_.root()) std::fprintf(stderr, "lctrain: error: %s\n", e.what());
    code = kExitError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lctrain: error on rank %d: %s\n", world_.rank, e.what());
    code = kExitError;
  }
  if (world_.root() && code == kExitRequeue)
    say(cat(timestamp(), "stopping in step ", step_, " of ", steps_, " (", stop_reason(why),
            "): the step is dropped; checkpoint '", path, "' of step ", step_ - 1, " written in ",
            std::fixed, std::setprecision(2), process_seconds() - t0, " s; to continue, run the same command with --resume auto (exit code ",
            int(kExitRequeue), ")"));
  std::fflush(stderr);
  barrier(world_.comm, "the other ranks' stop");  // no rank leaves before every one has written and said its line
  // The step's thread may be inside MPI or a parallel region: the process ends here, without
  // MPI_Finalize (the launchers report the ranks' exit code).
  ::_exit(code);
}

}  // namespace lct
