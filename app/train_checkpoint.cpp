#include "app/train_checkpoint.hpp"

#include <ostream>

#include "common/error.hpp"
#include "parallel/watchdog.hpp"

namespace lct {

void save_checkpoint(const World& w, RunDirectory* run, const std::string& run_dir,
                     const CheckpointView& c, const Provenance& prov, const RetentionPolicy& keep) {
  // Every rank knows the path: RunDirectory names it the same way everywhere.
  const std::string path = RunDirectory::path_of(run_dir, c.state.step);
  agreed(w, [&] {
    // HDF5's collective calls cannot be interrupted: a rank stuck in one (a hung file
    // system) is caught by the watchdog instead.
    WaitScope wait("the collective checkpoint write (parallel HDF5)");
    write_checkpoint(path, c, prov, w.comm);
  });
  agreed(w, [&] {
    if (!run) return;
    run->mark_latest(c.state.step);
    run->prune(keep.keep_last, keep.keep_every);
  });
}

std::optional<TrainState> resume_checkpoint(const World& w, std::ostream& out,
                                            const ResumeRequest& req, std::string* used_path) {
  std::vector<std::string> candidates;
  if (req.how == "auto") {
    std::vector<int64_t> steps;
    agreed(w, [&] {
      if (w.root()) steps = RunDirectory(req.run_dir, false).checkpoint_steps();
    });
    steps = broadcast_ints(steps, w.comm);
    for (auto s = steps.rbegin(); s != steps.rend(); ++s)
      candidates.push_back(RunDirectory::path_of(req.run_dir, *s));
    if (candidates.empty()) return std::nullopt;
  } else {
    candidates.push_back(req.how);
  }
  std::string first_error;
  for (const std::string& path : candidates) {
    TrainState state;
    const std::string err = run_agreed(w, [&] {
      state = read_checkpoint(path, *req.config, *req.layout, req.into, req.run, w.rank, req.rank);
    });
    if (err.empty()) {
      if (!first_error.empty())
        out << "resuming from the previous complete checkpoint '" << path << "'\n";
      *used_path = path;
      return state;
    }
    out << "warning: cannot resume from '" << path << "': " << err << "\n" << std::flush;
    if (first_error.empty()) first_error = err;
  }
  throw AgreedError(
      candidates.size() == 1
          ? first_error
          : cat("no usable checkpoint among the ", candidates.size(), " in '", req.run_dir,
                "/checkpoints'; the newest failed with: ", first_error));
}

}  // namespace lct
