// A run directory:  timing.h5, checkpoints/step_NNNNNNNN.h5, checkpoints/latest (the file
// name of the newest complete checkpoint, written after it, atomically). A checkpoint file
// only ever appears complete (it is renamed into place), but it can still be damaged later
// or be newer than the pointer (a crash between the two): resuming tries them newest first.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lct {

class RunDirectory {
 public:
  // Creates the directory and checkpoints/ when missing and checks it can be written;
  // throws when it cannot. With create = false only reads an existing one.
  explicit RunDirectory(std::string dir, bool create = true);
  const std::string& path() const { return dir_; }
  std::string timing_path() const { return dir_ + "/timing.h5"; }
  bool has_previous_run() const;  // a timing table or a checkpoint is there
  std::string checkpoint_path(int64_t step) const { return path_of(dir_, step); }
  static std::string path_of(const std::string& dir, int64_t step);
  // Removes temporary files a killed writer left behind (never a complete checkpoint).
  void remove_stale_temporaries();
  void mark_latest(int64_t step);
  std::string latest() const;     // full path, "" when none
  // Deletes every checkpoint but the newest `keep_last` and those whose step is a multiple
  // of `keep_every` (0: none kept that way).
  void prune(int64_t keep_last, int64_t keep_every);
  std::vector<int64_t> checkpoint_steps() const;  // ascending
  static std::string checkpoint_name(int64_t step);  // "step_00000010.h5"

 private:
  std::string dir_;
};

}  // namespace lct
