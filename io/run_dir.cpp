#include "io/run_dir.hpp"

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "common/knobs.hpp"
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

RunDirectory::~RunDirectory() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
}

void RunDirectory::lock(const std::string& holder) {
  const std::string path = dir_ + "/.lock";
  lock_fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) fail("run directory '", dir_, "': cannot open '", path, "': ", std::strerror(errno));
  struct flock l {};
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;
  if (::fcntl(lock_fd_, F_SETLK, &l) != 0) {
    const int err = errno;
    if (err != EACCES && err != EAGAIN)  // ENOLCK: a file system without locks
      fail("run directory '", dir_, "' cannot be locked (", std::strerror(err), "); lctrain locks ",
           "it so that two runs never write into one: choose a ", knob_name(Knob::RunDir), " on a file system with ",
           "POSIX locks (for Lustre: mount with flock)");
    char who[512] = {};
    [[maybe_unused]] const ssize_t n = ::pread(lock_fd_, who, sizeof who - 1, 0);
    std::string s = who;
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    ::close(lock_fd_);
    lock_fd_ = -1;
    fail("run directory '", dir_, "' is in use by another lctrain (", s.empty() ? "unknown" : s,
         "); wait for it to end, stop it, or choose another ", knob_name(Knob::RunDir));
  }
  const std::string line = holder + "\n";
  if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, line.data(), line.size(), 0) < 0)
    fail("run directory '", dir_, "': cannot write '", path, "': ", std::strerror(errno));
}

bool RunDirectory::has_previous_run() const {
  return fs::exists(timing_path()) || !checkpoint_steps().empty();
}

bool RunDirectory::holds_checkpoint(const std::string& file) const {
  std::error_code ec;
  const fs::path mine = fs::weakly_canonical(dir_ + "/checkpoints", ec);
  const fs::path theirs = fs::weakly_canonical(fs::path(file).parent_path(), ec);
  return !ec && mine == theirs;
}

std::string RunDirectory::checkpoint_name(int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "step_%08lld.h5", static_cast<long long>(step));
  return name;
}

std::string RunDirectory::path_of(const std::string& dir, int64_t step) {
  return dir + "/checkpoints/" + checkpoint_name(step);
}

namespace {
// Absolute: Open MPI's MPI-IO opens a file by its absolute name, whatever it was given.
size_t absolute_size(const std::string& path) {
  std::error_code ec;
  const fs::path a = fs::absolute(path, ec);
  return ec ? path.size() : a.string().size();
}
}  // namespace

size_t RunDirectory::longest_name(const std::string& dir) {
  const size_t base = absolute_size(dir);
  const size_t checkpoint = std::string("/checkpoints/").size() + checkpoint_name(0).size();
  const size_t temporary = checkpoint + unique_suffix().size();
  const size_t set_aside = std::string("/replaced-YYYYmmdd-HHMMSS-NN").size() + checkpoint;
  return base + std::max(temporary, set_aside);
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

void RunDirectory::remove_stale_temporaries() {
  std::error_code ec;
  for (const std::string& d : {dir_, dir_ + "/checkpoints"})
    for (const auto& e : fs::directory_iterator(d, ec))
      if (e.is_regular_file(ec) && e.path().filename().string().find(".tmp-") != std::string::npos)
        fs::remove(e.path(), ec);
}

namespace {
std::string first_word(const std::string& file) {
  std::ifstream in(file);
  std::string word;
  in >> word;
  return word;
}

void write_line(const std::string& file, const std::string& line, const std::string& what) {
  AtomicTarget t(file, true, what);
  {
    std::ofstream out(t.temp_path());
    out << line << "\n";
    if (!out) fail("cannot write '", t.temp_path(), "'");
  }
  t.commit();
}
}  // namespace

int64_t RunDirectory::latest_step() const {
  const std::string name = first_word(dir_ + "/checkpoints/latest");  // "step_00000010.h5"
  long long s;
  char tail[8];
  if (name.size() != 16 || std::sscanf(name.c_str(), "step_%8lld%4s", &s, tail) != 2 ||
      std::string(tail) != ".h5")
    return -1;
  return s;
}

void RunDirectory::mark_latest(int64_t step) {
  write_line(dir_ + "/checkpoints/latest", checkpoint_name(step), "checkpoint pointer");
}

std::string RunDirectory::latest() const {
  const int64_t s = latest_step();
  return s < 0 ? "" : checkpoint_path(s);
}

std::string RunDirectory::run_id() const { return first_word(dir_ + "/checkpoints/run_id"); }

void RunDirectory::set_run_id(const std::string& id) {
  write_line(dir_ + "/checkpoints/run_id", id, "run lineage");
}

std::string RunDirectory::set_aside(const std::vector<std::string>& relative) {
  if (relative.empty()) return "";
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  std::string dest = cat(dir_, "/replaced-", stamp);
  for (int n = 2; fs::exists(dest); ++n) dest = cat(dir_, "/replaced-", stamp, "-", n);
  for (const std::string& r : relative)
    if (absolute_size(dest + "/" + r) >= PATH_MAX)
      fail("run directory '", dir_, "': '", r, "' cannot be set aside into '", dest, "': the name ",
           "would be ", absolute_size(dest + "/" + r), " characters long, past the system's limit of ",
           PATH_MAX - 1, "; nothing was moved: choose a shorter path");
  std::error_code ec;
  fs::create_directories(dest + "/checkpoints", ec);
  if (ec) fail("run directory '", dir_, "': cannot create '", dest, "': ", ec.message());
  for (size_t i = 0; i < relative.size(); ++i) {
    fs::rename(dir_ + "/" + relative[i], dest + "/" + relative[i], ec);
    if (!ec) continue;
    const std::string why = ec.message();
    std::error_code back;
    for (size_t j = i; j-- > 0;) fs::rename(dest + "/" + relative[j], dir_ + "/" + relative[j], back);
    fs::remove(dest + "/checkpoints", back);
    fs::remove(dest, back);
    fail("run directory '", dir_, "': cannot move '", relative[i], "' to '", dest, "': ", why,
         "; the files moved before it were put back");
  }
  fsync_path(dir_, "directory");
  fsync_path(dir_ + "/checkpoints", "directory");
  return dest;
}

std::string RunDirectory::set_aside_checkpoints_after(int64_t step) {
  std::vector<std::string> moved;
  for (int64_t s : checkpoint_steps())
    if (s > step) moved.push_back("checkpoints/" + checkpoint_name(s));
  return set_aside(moved);
}

std::string RunDirectory::set_aside_timing() {
  return fs::exists(timing_path()) ? set_aside({"timing.h5"}) : "";
}

std::string RunDirectory::set_aside_previous_run() {
  std::vector<std::string> moved;
  if (fs::exists(timing_path())) moved.push_back("timing.h5");
  for (int64_t s : checkpoint_steps()) moved.push_back("checkpoints/" + checkpoint_name(s));
  if (moved.empty()) return "";
  for (const char* f : {"checkpoints/latest", "checkpoints/run_id"})
    if (fs::exists(dir_ + "/" + f)) moved.push_back(f);
  return set_aside(moved);
}

void RunDirectory::prune(int64_t keep_last, int64_t keep_every, int64_t newest) {
  std::vector<int64_t> steps = checkpoint_steps();
  steps.erase(std::upper_bound(steps.begin(), steps.end(), newest), steps.end());
  for (size_t i = 0; i + size_t(std::max<int64_t>(1, keep_last)) < steps.size(); ++i)
    if (keep_every <= 0 || steps[i] % keep_every != 0) fs::remove(checkpoint_path(steps[i]));
}

}  // namespace lct
