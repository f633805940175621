#include "app/cli/progress.hpp"

#include <omp.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <ostream>

namespace lct {

std::string local_time() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char out[32];
  std::strftime(out, sizeof out, "%Y-%m-%d %H:%M:%S", &local);
  return out;
}

std::string timestamp() {
  std::string s = "[";  // appended, not "[" + ...: GCC 12 warns (-Wrestrict) on that form
  return s.append(local_time()).append("] ");
}

std::string duration(double s) {
  char out[32];
  if (s < 120) std::snprintf(out, sizeof out, "%.0fs", s);
  else if (s < 7200) std::snprintf(out, sizeof out, "%.0fm%02.0fs", std::floor(s / 60), std::fmod(s, 60));
  else std::snprintf(out, sizeof out, "%.0fh%02.0fm", std::floor(s / 3600), std::fmod(s / 60, 60));
  return out;
}

Progress::Progress(std::ostream& out, std::string what, double every_s)
    : out_(out), what_(std::move(what)), every_(every_s), start_(omp_get_wtime()), last_(start_) {}

double Progress::seconds() const { return omp_get_wtime() - start_; }

namespace {

// 120 sequences, 1074 MB, 0.35 MB: whole numbers and large ones without decimals.
std::string amount(double v) {
  char out[32];
  const bool whole = v >= 100 || std::abs(v - std::round(v)) < 1e-9;
  std::snprintf(out, sizeof out, whole ? "%.0f" : "%.2f", v);
  return out;
}

}  // namespace

void Progress::update(double done, double total, const std::string& unit, const std::string& extra) {
  const double now = omp_get_wtime();
  if (every_ <= 0 || now - last_ < every_) return;
  last_ = now;
  const double secs = now - start_, rate = done / secs;
  char line[320];
  const int digits = rate < 100 ? 2 : 0;  // 3.40 sequences/s, 95 MB/s
  if (total > 0)
    std::snprintf(line, sizeof line, "%s: %s / %s %s%s (%.1f%%), %.*f %s/s, %s so far, eta %s",
                  what_.c_str(), amount(done).c_str(), amount(total).c_str(), unit.c_str(), extra.c_str(),
                  100 * done / total, digits, rate, unit.c_str(), duration(secs).c_str(),
                  duration(rate > 0 ? (total - done) / rate : 0).c_str());
  else
    std::snprintf(line, sizeof line, "%s: %s %s%s, %.*f %s/s, %s so far", what_.c_str(),
                  amount(done).c_str(), unit.c_str(), extra.c_str(), digits, rate, unit.c_str(),
                  duration(secs).c_str());
  out_ << timestamp() << line << std::endl;
}

}  // namespace lct
