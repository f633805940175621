// Asking a long run to stop: SIGUSR1 or SIGTERM set a flag that the training loop reads at
// the next step boundary (where the ranks agree, write a checkpoint and exit with
// kExitRequeue). A second SIGTERM or SIGINT exits at once with kExitPrompt: the previous
// checkpoint stays the resume point. SIGXFSZ is ignored, so a file-size limit shows up as
// a failed write (EFBIG) with a clear message rather than as a killed process.
#pragma once

namespace lct {

void install_stop_handlers();
int stop_signal();          // 0, or the first signal received
const char* stop_signal_name();  // "SIGUSR1", ... ("" when none)
const char* signal_name(int sig);  // "SIGUSR1", "SIGTERM", "SIGINT"; "" for any other

// Seconds since the process started (steady clock), for --time-limit.
double process_seconds();

}  // namespace lct
