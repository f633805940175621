// A run directory:  timing.h5, checkpoints/step_NNNNNNNN.h5, checkpoints/latest,
// checkpoints/run_id, .lock.
//
// `latest` is the source of truth: written after its checkpoint, atomically, it holds the
// file name of the newest complete checkpoint of the run. `run_id` holds the run's lineage
// id, which every checkpoint of the run carries too. A checkpoint file only ever
// appears complete (it is renamed into place) but can be damaged later, or be newer than the
// pointer (a crash between the two); resuming starts at `latest` and falls back only to
// older checkpoints of the same lineage. Files of another run are never deleted or mixed in:
// they are set aside, whole, into replaced-<date>-<time>/.
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
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  // An advisory lock (fcntl: seen across NFS and Lustre clients too) on .lock, held until
  // this object is destroyed; `holder` ("pid 12 on host n1 since ...") is written into the
  // file so that a second run is refused with a message that names the first.
  void lock(const std::string& holder);

  const std::string& path() const { return dir_; }
  std::string timing_path() const { return dir_ + "/timing.h5"; }
  bool has_previous_run() const;  // a timing table or a checkpoint is there
  // Whether `file` lies in this directory's checkpoints/ (a resume from it continues this run).
  bool holds_checkpoint(const std::string& file) const;
  std::string checkpoint_path(int64_t step) const { return path_of(dir_, step); }
  static std::string path_of(const std::string& dir, int64_t step);
  static std::string checkpoint_name(int64_t step);  // "step_00000010.h5"
  std::vector<int64_t> checkpoint_steps() const;     // ascending
  // Length of the longest name lctrain writes under `dir`, as the absolute path MPI-IO opens:
  // a checkpoint's temporary file, or a checkpoint set aside into replaced-DATE-TIME-N/.
  static size_t longest_name(const std::string& dir);

  // Removes temporary files killed writers left behind (never a complete file). Only safe
  // under lock(): another run's in-flight files look the same.
  void remove_stale_temporaries();

  int64_t latest_step() const;  // the step `latest` names, -1 when none
  void mark_latest(int64_t step);
  std::string latest() const;  // full path of the checkpoint `latest` names, "" when none
  std::string run_id() const;  // the lineage of the checkpoints here, "" when none yet
  void set_run_id(const std::string& id);

  // Moves the timing table and every checkpoint (and `latest`) into a new
  // replaced-<date>-<time>/ beside them; returns its path ("" when there was nothing).
  // All or nothing: every destination name is checked before the first move, and a move
  // that fails puts back the ones before it, so a run is never left split in two.
  std::string set_aside_previous_run();
  // The same for the checkpoints after `step` only: an abandoned branch after a rollback.
  std::string set_aside_checkpoints_after(int64_t step);
  std::string set_aside_timing();  // the table alone (a run killed before its first checkpoint)

  // Deletes every checkpoint up to `newest` but the last `keep_last` and those whose step
  // is a multiple of `keep_every` (0: none kept that way). Later ones are not this branch's.
  void prune(int64_t keep_last, int64_t keep_every, int64_t newest);

 private:
  std::string set_aside(const std::vector<std::string>& relative);
  std::string dir_;
  int lock_fd_ = -1;
};

}  // namespace lct
