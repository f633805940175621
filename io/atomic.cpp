#include "io/atomic.hpp"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "common/knobs.hpp"
#include "common/error.hpp"

namespace lct {

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

void fsync_path(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0 || ::fsync(fd) != 0) {
    const std::string err = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    fail(what, " '", path, "': could not flush to disk: ", err);
  }
  ::close(fd);
}

std::string unique_suffix() {
  // Two writers of one name can share a pid (two hosts on a shared file system, or two
  // writes in one process): host, pid and 32 random bits keep their temporary files apart.
  char host[256] = "host";
  ::gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = 0;
  std::random_device rd;
  char tail[16];
  std::snprintf(tail, sizeof tail, "%08x", unsigned(rd()));
  return cat(".tmp-", host, "-", ::getpid(), "-", tail);
}

AtomicTarget::AtomicTarget(std::string final_path, bool force, const std::string& what)
    : final_(std::move(final_path)), what_(what), force_(force) {
  check_can_write(final_, force, what);
  temp_ = final_ + unique_suffix();
}

void check_can_write(const std::string& final_, bool force, const std::string& what) {
  if (final_.empty()) fail(what, ": the file name is empty; give a file name");
  struct stat st;
  if (::stat(final_.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) fail(what, " '", final_, "' is a directory; give a file name");
    // --force replaces a file lctrain could have written, never a device, pipe or socket.
    if (!S_ISREG(st.st_mode))
      fail(what, " '", final_, "' exists and is not a regular file (a device, pipe or socket); ",
           "lctrain replaces only regular files, even with ", knob_name(Knob::Force), ": choose another name");
    if (!force)
      fail(what, " '", final_, "' already exists; lctrain never overwrites a file unless asked: ",
           "pass ", knob_name(Knob::Force), " to replace it, or choose another name");
  }
  const std::string dir = parent_dir(final_);
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    fail(what, " '", final_, "': directory '", dir, "' does not exist; create it first");
  if (::access(dir.c_str(), W_OK) != 0)
    fail(what, " '", final_, "': directory '", dir, "' is not writable (", std::strerror(errno),
         "); choose a directory you can write to");
}

void check_free_space(const std::string& path, double bytes, const std::string& what,
                      const std::string& advice) {
  struct statvfs fs;
  const std::string dir = parent_dir(path);
  if (::statvfs(dir.c_str(), &fs) != 0) return;  // unknown: the write itself will tell
  const double free = double(fs.f_bavail) * double(fs.f_frsize);
  if (free < 1.01 * bytes)
    fail(what, " '", path, "' needs about ", cat(int64_t(bytes / (1 << 20) + 1)), " MiB but only ",
         int64_t(free / (1 << 20)), " MiB are free in '", dir,
         "'; ", advice);
}

void reserve_space(const std::string& path, double bytes, const std::string& what,
                   const std::string& shown, const std::string& advice) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  if (fd < 0) fail(what, " '", path, "' cannot be opened: ", std::strerror(errno));
  const int rc = ::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, off_t(bytes));
  const int err = errno;
  ::close(fd);
  if (rc == 0) return;
  if (err == EOPNOTSUPP || err == ENOSYS) return check_free_space(shown, bytes, what, advice);
  struct statvfs fs;
  const double free = ::statvfs(parent_dir(path).c_str(), &fs) == 0
                          ? double(fs.f_bavail) * double(fs.f_frsize) : 0;
  fail(what, " '", shown, "': cannot reserve ", int64_t(bytes / (1 << 20) + 1), " MiB on disk (",
       std::strerror(err), "; ", int64_t(free / (1 << 20)), " MiB free); ", advice);
}

void release_reserve(const std::string& path) {
  // Truncating to the current size frees the blocks past it (ext4, xfs, tmpfs).
  const int fd = ::open(path.c_str(), O_WRONLY);
  if (fd < 0) return;
  struct stat st;
  if (::fstat(fd, &st) == 0) [[maybe_unused]] const int rc = ::ftruncate(fd, st.st_size);
  ::close(fd);
}

AtomicTarget::~AtomicTarget() {
  if (!committed_) ::unlink(temp_.c_str());
}

bool rename_no_replace(const std::string& from, const std::string& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return true;
  if (errno == EEXIST) return false;
  if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
    fail("could not rename '", from, "' to '", to, "': ", std::strerror(errno));
  // No RENAME_NOREPLACE here (some network file systems): a hard link is exclusive too.
  if (::link(from.c_str(), to.c_str()) != 0) {
    if (errno == EEXIST) return false;
    fail("could not link '", from, "' to '", to, "': ", std::strerror(errno));
  }
  ::unlink(from.c_str());
  return true;
}

void AtomicTarget::commit() {
  fsync_path(temp_, "temporary file");
  if (force_) {
    if (::rename(temp_.c_str(), final_.c_str()) != 0)
      fail("could not rename '", temp_, "' to '", final_, "': ", std::strerror(errno));
  } else if (!rename_no_replace(temp_, final_)) {
    fail(what_, " '", final_, "' appeared while lctrain was writing it (another writer made it); ",
         "lctrain never overwrites a file unless asked: pass ", knob_name(Knob::Force), " to replace it, or choose another name");
  }
  committed_ = true;
  fsync_path(parent_dir(final_), "directory");
}

}  // namespace lct
