// Where a long computation is, for whoever reports progress: the model's passes mark each
// layer, the application its start-up phases. The application installs one listener
// (lctrain: rank 0 prints a time-stamped line at most every --progress-every seconds,
// app/training/step_progress.cpp); without one, a mark is one relaxed atomic load.
#pragma once
#include <cstdint>

namespace lct {

using ProgressListener = void (*)(const char* what, int64_t done, int64_t total);
void set_progress_listener(ProgressListener listener);  // null: none
// `what` is at `done` of `total` (total 0: a phase without a count).
void progress_mark(const char* what, int64_t done, int64_t total);

}  // namespace lct
