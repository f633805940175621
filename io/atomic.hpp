// Writing a file without ever leaving a half-written one in its place: write under a
// temporary name beside the target, fsync, rename over, fsync the directory. Refuses to
// replace an existing file unless `force`: checked at the start (to fail before working) and
// again by the final step itself, which without `force` is exclusive (a rename that refuses
// to replace, or a hard link), so that of two writers started together only one succeeds.
#pragma once
#include <string>

#include "common/error.hpp"
#include "common/knobs.hpp"

namespace lct {

// ".tmp-HOST-PID-RANDOM": the suffix of a temporary file, unique across hosts and calls.
std::string unique_suffix();

class AtomicTarget {
 public:
  AtomicTarget(std::string final_path, bool force, const std::string& what);
  ~AtomicTarget();  // removes the temporary file unless committed
  AtomicTarget(const AtomicTarget&) = delete;
  AtomicTarget& operator=(const AtomicTarget&) = delete;

  const std::string& temp_path() const { return temp_; }
  const std::string& final_path() const { return final_; }
  void commit();  // the temporary file must be closed; throws if the final name appeared meanwhile

 private:
  std::string final_, temp_, what_;
  bool force_, committed_ = false;
};

// Throws unless `path` could be written: a non-empty name whose directory exists and is
// writable, and not an existing file (unless force; and never a directory, device, pipe or
// socket). Lets long runs fail before working.
void check_can_write(const std::string& path, bool force, const std::string& what);

// What a message about a full disk tells a user of training, and of any other writer.
inline std::string run_dir_space_advice() {
  return cat("free some space (or lower ", knob_name(Knob::KeepCheckpoints), "), or choose another ", knob_name(Knob::RunDir));
}
inline constexpr const char* kFileSpaceAdvice = "free some space, or write the file elsewhere";

// Throws unless the file system holding `path` has `bytes` free (plus a 1% margin).
void check_free_space(const std::string& path, double bytes, const std::string& what,
                      const std::string& advice = kFileSpaceAdvice);

// Reserves `bytes` of disk blocks for the (existing, open elsewhere) file at `path` without
// changing its size, so that writes up to that size cannot fail for lack of space.
// Throws when the space is not there; falls back to check_free_space on file systems
// without fallocate.
// `shown` is the name messages give (the final name of a temporary file).
void reserve_space(const std::string& path, double bytes, const std::string& what,
                   const std::string& shown, const std::string& advice = kFileSpaceAdvice);

// Gives back the reserved blocks past the end of the file once it is complete.
void release_reserve(const std::string& path);

// Moves `from` to `to` unless `to` exists (then returns false, `from` untouched): renameat2's
// RENAME_NOREPLACE, or where a file system lacks it, link(2) then unlink. Throws on other errors.
bool rename_no_replace(const std::string& from, const std::string& to);

// Directory part of a path ("." when it has none).
std::string parent_dir(const std::string& path);
void fsync_path(const std::string& path, const std::string& what);

}  // namespace lct
