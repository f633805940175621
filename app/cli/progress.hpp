// What rank 0 prints about time: a timestamp for log lines, and progress lines for long
// loops (eval's sequences, prepare's bytes and documents), so a user watching a long job, or
// reading its log the next morning, sees that it moves, how fast, and when each line was.
#pragma once
#include <iosfwd>
#include <string>
#include <utility>

namespace lct {

// "2026-11-22 10:31:07": local time, ISO 8601 order.
std::string local_time();
// "[2026-11-22 10:31:07] ": the prefix of timed lines.
std::string timestamp();

std::string duration(double seconds);  // "45s", "3m07s", "2h05m"

// At most one line per `every_s` seconds (0: none), written to `out` (rank 0's stream; a
// null stream elsewhere); the rate and time left count from construction:
//   [2026-11-22 22:36:07] eval: 40 / 64 sequences (62.5%), 19.72 sequences/s, 2s so far, eta 1s
class Progress {
 public:
  Progress(std::ostream& out, std::string what, double every_s);
  // `done` of `total` `unit`s so far (total 0: unknown, no share or eta); `extra` follows the
  // unit (" from 3 of 10 files").
  void update(double done, double total, const std::string& unit, const std::string& extra = "");
  double seconds() const;  // since construction

 private:
  std::ostream& out_;
  std::string what_;
  double every_, start_, last_;
};

}  // namespace lct
