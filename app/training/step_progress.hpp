// Rank 0's progress lines inside long steps and start-up, so that a slow job and a stuck one
// look different: at most one per `every_s` seconds since the last line, time stamped,
//   [2026-11-26 04:50:00] step 3/600: backward, layer 7 of 16 (31s into the step)
//   [2026-11-26 04:49:20] start-up: building the model and its parts (45s since the start)
// fed by the marks of the model's passes and of cmd_train (common/progress_mark.hpp).
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>

namespace lct {

class StepProgress {
 public:
  // Listens while it lives, where `out` is set and every_s > 0 (rank 0); elsewhere nothing.
  StepProgress(std::ostream* out, double every_s, int64_t steps);
  ~StepProgress();
  StepProgress(const StepProgress&) = delete;
  StepProgress& operator=(const StepProgress&) = delete;

  void phase(const std::string& what);  // a start-up phase begins
  void step_started(int64_t step);      // the steps' own lines: the count restarts

 private:
  static void listen(const char* what, int64_t done, int64_t total);
  void mark(const std::string& where);

  std::ostream* out_;
  double every_, start_, last_, step_start_ = 0;
  int64_t steps_, step_ = 0;  // step 0: start-up
};

}  // namespace lct
