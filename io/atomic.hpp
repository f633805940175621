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

// Directory part of a path ("." when it has none).
std::string parent_dir(const std::string& path);
void fsync_path(const std::string& path, const std::string& what);

}  // namespace lct
