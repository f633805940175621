#include "sys/stop.hpp"

#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <system_error>
#include <thread>

#include "common/error.hpp"

namespace lct {

namespace {
volatile std::sig_atomic_t g_signal = 0;
const auto g_start = std::chrono::steady_clock::now();
sem_t g_arrived;  // posted by a stop signal, for wait_for_stop_signal (sem_post is async-signal-safe)
const bool g_sem_ready = sem_init(&g_arrived, 0, 0) == 0;

void on_signal(int sig) {
  if (g_signal == 0 || sig == SIGUSR1) {
    if (g_signal == 0) g_signal = sig;
    if (g_sem_ready) sem_post(&g_arrived);
    return;
  }
  // A second SIGTERM/SIGINT: the user or the scheduler wants out now. Only async-signal-safe
  // calls here.
  static const char msg[] =
      "lctrain: second stop signal: exiting now without a checkpoint; resume from the previous one\n";
  [[maybe_unused]] const ssize_t n = ::write(2, msg, sizeof msg - 1);
  ::_exit(kExitPrompt);
}
}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGUSR1, SIGTERM, SIGINT}) sigaction(sig, &sa, nullptr);
  keep_signals_off_compute_threads();  // and a thread that takes them, if none does yet
  std::signal(SIGXFSZ, SIG_IGN);
  std::signal(SIGPIPE, SIG_IGN);
}

namespace {
// Asynchronous and process-directed: a launcher's, a scheduler's or a terminal's. SIGPIPE and
// SIGXFSZ are left out: they go to the thread that wrote.
sigset_t job_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGCHLD, SIGCONT,
                  SIGTSTP, SIGURG, SIGXCPU, SIGWINCH, SIGIO})
    sigaddset(&set, sig);
  return set;
}
}  // namespace

void block_job_signals_in_this_thread() {
  const sigset_t set = job_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void keep_signals_off_compute_threads() {
  static bool started = false;
  if (started) return;
  const sigset_t set = job_signals();
  // The kept thread has a stack of its own (glibc's, never oneDNN's): handlers run there,
  // and a signal with its default action (SIGTERM before install_stop_handlers) still
  // ends the process. A signal sent before it unblocks them waits until it does.
  try {
    std::thread([set] {
      pthread_setname_np(pthread_self(), "lct-signals");  // as top -H and gdb show it
      pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
      for (;;) ::pause();
    }).detach();
  } catch (const std::system_error&) {
    return;  // no thread: signals stay where they were (handled on any thread)
  }
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  started = true;
}

namespace {
class StopAwareOut : public std::streambuf {
 public:
  StopAwareOut() { setp(buf_, buf_ + sizeof buf_); }

 protected:
  int_type overflow(int_type c) override {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return drain() ? 0 : -1; }

 private:
  // Writes the buffer out in pieces a pipe with room takes whole (at most 512 bytes), each
  // after poll says fd 1 has room, checking for a stop between waits of 50 ms.
  bool drain() {
    const char* p = pbase();
    while (p < pptr()) {
      pollfd fd{1, POLLOUT, 0};
      const int ready = ::poll(&fd, 1, 50);
      if (ready > 0 && !(fd.revents & POLLOUT)) break;  // closed or broken: drop
      if (ready > 0) {
        const ssize_t n = ::write(1, p, size_t(std::min<std::ptrdiff_t>(pptr() - p, 512)));
        if (n > 0) p += n;
        if (n < 0 && errno != EINTR && errno != EAGAIN) break;  // EPIPE: the reader is gone
        continue;
      }
      if (stop_signal() == 0) continue;
      // One grace for the whole stop, not one per line.
      if (stop_seen_ < 0) stop_seen_ = process_seconds();
      if (process_seconds() - stop_seen_ > kStopOutputGrace) break;
    }
    setp(buf_, buf_ + sizeof buf_);  // written, or dropped
    return true;
  }
  char buf_[4096];
  double stop_seen_ = -1;  // when a wait first met a pending stop
};
}  // namespace

std::streambuf* stop_aware_stdout() {
  static StopAwareOut* out = new StopAwareOut;  // never destroyed: std::cout flushes at exit
  return out;
}

int stop_signal() { return g_signal; }

void wait_for_stop_signal() {
  while (g_sem_ready && sem_wait(&g_arrived) != 0 && errno == EINTR) {
  }
  if (g_sem_ready) sem_post(&g_arrived);  // the next waiter returns too
}

void wake_stop_waiters() {
  if (g_sem_ready) sem_post(&g_arrived);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGUSR1: return "SIGUSR1";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "";
  }
}

const char* stop_signal_name() { return signal_name(g_signal); }

double process_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count();
}

}  // namespace lct
