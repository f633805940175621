// A run directory:  timing.h5, checkpoints/step_NNNNNNNN.h5, checkpoints/latest (the file
// name of the newest complete checkpoint, written after it, atomically).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lct {

class RunDirectory {
 public:
  // Creates the directory and checkpoints/ when missing; throws when it cannot.
  explicit RunDirectory(std::string dir);
  const std::string& path() const { return dir_; }
  std::string timing_path() const { return dir_ + "/timing.h5"; }
  bool has_previous_run() const;  // a timing table or a checkpoint is there
  std::string checkpoint_path(int64_t step) const;
  void mark_latest(int64_t step);
  std::string latest() const;     // full path, "" when none
  // Deletes all but the newest `keep` checkpoints (keep >= 1).
  void prune(int64_t keep);
  std::vector<int64_t> checkpoint_steps() const;  // ascending

 private:
  std::string dir_;
};

}  // namespace lct
