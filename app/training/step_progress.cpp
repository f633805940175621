#include "app/training/step_progress.hpp"

#include <omp.h>

#include <ostream>

#include "app/cli/progress.hpp"
#include "common/error.hpp"
#include "common/progress_mark.hpp"

namespace lct {

namespace {
StepProgress* g_active = nullptr;  // the listener's target: one per process
}  // namespace

StepProgress::StepProgress(std::ostream* out, double every_s, int64_t steps)
    : out_(every_s > 0 ? out : nullptr), every_(every_s), start_(omp_get_wtime()), last_(start_), steps_(steps) {
  if (!out_) return;
  g_active = this;
  set_progress_listener(listen);
}

StepProgress::~StepProgress() {
  if (!out_) return;
  set_progress_listener(nullptr);
  g_active = nullptr;
}

// Called at every layer of every pass: a clock read unless a line is due.
void StepProgress::listen(const char* what, int64_t done, int64_t total) {
  if (!g_active || omp_get_wtime() - g_active->last_ < g_active->every_) return;
  g_active->mark(total > 0 ? cat(what, " ", done, " of ", total) : std::string(what));
}

void StepProgress::phase(const std::string& what) {
  if (out_) mark(what);
}

void StepProgress::step_started(int64_t step) {
  step_ = step;
  step_start_ = last_ = omp_get_wtime();
}

void StepProgress::mark(const std::string& where) {
  const double now = omp_get_wtime();
  if (now - last_ < every_) return;
  last_ = now;
  if (step_ == 0)
    *out_ << timestamp() << "start-up: " << where << " (" << duration(now - start_) << " since the start)" << std::endl;
  else
    *out_ << timestamp() << "step " << step_ << "/" << steps_ << ": " << where << " ("
          << duration(now - step_start_) << " into the step)" << std::endl;
}

}  // namespace lct
