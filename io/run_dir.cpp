#include "io/run_dir.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/error.hpp"
#include "io/atomic.hpp"

namespace lct {

namespace fs = std::filesystem;

RunDirectory::RunDirectory(std::string dir, bool create) : dir_(std::move(dir)) {
  if (!create) return;
  std::error_code ec;
  fs::create_directories(dir_ + "/checkpoints", ec);
  if (ec) fail("run directory '", dir_, "' cannot be created: ", ec.message());
  if (::access(dir_.c_str(), W_OK) != 0 || ::access((dir_ + "/checkpoints").c_str(), W_OK) != 0)
    fail("run directory '", dir_, "' is not writable; choose a directory you can write to");
}

bool RunDirectory::has_previous_run() const {
  return fs::exists(timing_path()) || !checkpoint_steps().empty();
}

std::string RunDirectory::checkpoint_name(int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "step_%08lld.h5", static_cast<long long>(step));
  return name;
}

std::string RunDirectory::path_of(const std::string& dir, int64_t step) {
  return dir + "/checkpoints/" + checkpoint_name(step);
}

void RunDirectory::remove_stale_temporaries() {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_ + "/checkpoints", ec))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) fs::remove(e.path(), ec);
}

void RunDirectory::mark_latest(int64_t step) {
  const std::string target = dir_ + "/checkpoints/latest";
  AtomicTarget t(target, true, "checkpoint pointer");
  {
    std::ofstream out(t.temp_path());
    out << checkpoint_name(step) << "\n";
    if (!out) fail("cannot write '", t.temp_path(), "'");
  }
  t.commit();
}

std::string RunDirectory::latest() const {
  std::ifstream in(dir_ + "/checkpoints/latest");
  std::string name;
  if (!(in >> name)) return "";
  return dir_ + "/checkpoints/" + name;
}

std::vector<int64_t> RunDirectory::checkpoint_steps() const {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_ + "/checkpoints", ec)) {
    const std::string n = e.path().filename().string();
    long long s;
    char tail[8];
    if (n.size() == 16 && std::sscanf(n.c_str(), "step_%8lld%4s", &s, tail) == 2 &&
        std::string(tail) == ".h5")
      steps.push_back(s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

void RunDirectory::prune(int64_t keep_last, int64_t keep_every) {
  const std::vector<int64_t> steps = checkpoint_steps();
  for (size_t i = 0; i + size_t(std::max<int64_t>(1, keep_last)) < steps.size(); ++i)
    if (keep_every <= 0 || steps[i] % keep_every != 0) fs::remove(checkpoint_path(steps[i]));
}

}  // namespace lct
