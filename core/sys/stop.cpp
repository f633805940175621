#include "sys/stop.hpp"

#include <unistd.h>

#include <chrono>
#include <csignal>

#include "common/error.hpp"

namespace lct {

namespace {
volatile std::sig_atomic_t g_signal = 0;
const auto g_start = std::chrono::steady_clock::now();

void on_signal(int sig) {
  if (g_signal == 0 || sig == SIGUSR1) {
    if (g_signal == 0) g_signal = sig;
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
  std::signal(SIGXFSZ, SIG_IGN);
}

int stop_signal() { return g_signal; }

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
