// Writing a file without ever leaving a half-written one in its place: write under a
// temporary name beside the target, fsync, rename over, fsync the directory. Refuses to
// replace an existing file unless `force`.
#pragma once
#include <string>

namespace lct {

class AtomicTarget {
 public:
  AtomicTarget(std::string final_path, bool force, const std::string& what);
  ~AtomicTarget();  // removes the temporary file unless committed
  AtomicTarget(const AtomicTarget&) = delete;
  AtomicTarget& operator=(const AtomicTarget&) = delete;

  const std::string& temp_path() const { return temp_; }
  const std::string& final_path() const { return final_; }
  void commit();  // the temporary file must be closed

 private:
  std::string final_, temp_;
  bool committed_ = false;
};

// Throws unless `path` could be written: its directory exists and is writable, and it is
// not an existing file (unless force) or a directory. Lets long runs fail before working.
void check_can_write(const std::string& path, bool force, const std::string& what);

// Throws unless the file system holding `path` has `bytes` free (plus a 1% margin).
void check_free_space(const std::string& path, double bytes, const std::string& what);

// Reserves `bytes` of disk blocks for the (existing, open elsewhere) file at `path` without
// changing its size, so that writes up to that size cannot fail for lack of space.
// Throws when the space is not there; falls back to check_free_space on file systems
// without fallocate.
// `shown` is the name messages give (the final name of a temporary file).
void reserve_space(const std::string& path, double bytes, const std::string& what,
                   const std::string& shown);

// Gives back the reserved blocks past the end of the file once it is complete.
void release_reserve(const std::string& path);

// Directory part of a path ("." when it has none).
std::string parent_dir(const std::string& path);
void fsync_path(const std::string& path, const std::string& what);

}  // namespace lct
