// Asking a long run to stop: SIGUSR1 or SIGTERM set a flag that the training loop reads at
// the next step boundary (where the ranks agree, write a checkpoint and exit with
// kExitRequeue). A second SIGTERM or SIGINT exits at once with kExitPrompt: the previous
// checkpoint stays the resume point. SIGXFSZ is ignored, so a file-size limit shows up as
// a failed write (EFBIG) with a clear message rather than as a killed process.
#pragma once
#include <streambuf>

namespace lct {

// Also ignores SIGPIPE: a launcher that dies (or a reader that quits) must cost the run its
// output, not the process.
void install_stop_handlers();

// Keeps the asynchronous signals a job is sent (a scheduler's SIGTERM and SIGUSR1, SIGINT,
// SIGCHLD, SIGCONT, ...) off the threads that compute: they are blocked in the calling
// thread, which every thread it starts inherits, and delivered to one thread kept for them.
// Why: oneDNN's f32 GEMM kernel (the nocopy kernel of its gemm:jit matmul, which runs
// lctrain's weight gradients at some shapes) points the stack pointer at a heap buffer while
// it runs. A signal handled on that thread pushes its frame (about 3 KB with AVX-512 state)
// below the buffer, over the heap's bookkeeping, and the process dies later in free().
// Call it on the main thread before OpenMP's pool starts. Faults (SIGSEGV, SIGFPE, ...) and
// profilers' signals (SIGPROF, real-time signals) are left alone.
void keep_signals_off_compute_threads();
// The same block for a thread that was started before (OpenMP's pool, from inside a parallel
// region); the thread kept for signals is not affected.
void block_job_signals_in_this_thread();

// A buffer for rank 0's std::cout whose writes to fd 1 never hold up a stop: it waits for
// the reader as a plain write would until a stop signal arrives, then gives the reader
// kStopOutputGrace seconds more and drops what it cannot take. A launcher that was sent
// SIGTERM (Open MPI's mpirun) stops reading its ranks' output and kills them a second
// later: a rank blocked writing a line to it would never write its checkpoint.
std::streambuf* stop_aware_stdout();
inline constexpr double kStopOutputGrace = 0.2;
int stop_signal();          // 0, or the first signal received
// Blocks until a stop signal has arrived or wake_stop_waiters() was called (for a thread
// that acts on a signal: no polling).
void wait_for_stop_signal();
void wake_stop_waiters();
const char* stop_signal_name();  // "SIGUSR1", ... ("" when none)
const char* signal_name(int sig);  // "SIGUSR1", "SIGTERM", "SIGINT"; "" for any other

// Seconds since the process started (steady clock), for --time-limit.
double process_seconds();

}  // namespace lct
