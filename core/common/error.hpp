// Errors: one exception type for every user-facing failure. Its message says what is wrong
// and how to fix it; app/ prints it once (rank 0) and exits non-zero on every rank.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace lct {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Concatenates its arguments with operator<<.
template <class... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw Error(cat(parts...));
}

// Exit codes, documented in docs/operations.md ("Exit codes").
enum ExitCode : int {
  kExitOk = 0,
  kExitError = 1,     // bad input or a failure at run time
  kExitUsage = 2,     // the command line or config file could not be parsed
  kExitRequeue = 85,  // stopped cleanly on a signal or time limit after a checkpoint
  kExitPrompt = 86,   // stopped at once (second signal, hard deadline): resume from the last one
  kExitAborted = 87,  // the whole job was aborted: a rank failed alone or hung in communication
};

}  // namespace lct
