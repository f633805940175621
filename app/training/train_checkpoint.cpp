#include "app/training/train_checkpoint.hpp"

#include <ostream>

#include "app/training/train_setup.hpp"
#include "common/error.hpp"
#include "common/finite.hpp"
#include "parallel/watchdog.hpp"

namespace lct {

void save_checkpoint(const World& w, RunDirectory* run, const std::string& run_dir,
                     const CheckpointView& c, const Provenance& prov, const RetentionPolicy& keep) {
  // Every rank knows the path: RunDirectory names it the same way everywhere.
  const std::string path = RunDirectory::path_of(run_dir, c.state.step);
  // Only rank 0 holds the run directory; the rank that finds bad weights names the pointer.
  const std::string last_good = broadcast_string(latest_or_none(run), w.comm);
  agreed(w, [&] {  // each rank checks what it holds (replicas should find the same)
    const NonFinite bad = c.parts ? count_non_finite(c.parts->held, c.parts->held_size)
                                  : count_non_finite(c.params, size_t(c.layout->total));
    if (bad.total())
      fail("the weights after step ", c.state.step, " are not finite (", describe(bad), " among ",
           c.layout->total, "); ",
           "no checkpoint is written for them and the last good one stays ", last_good,
           "; lower --lr, raise --warmup-steps or check the data, then resume");
  });
  agreed(w, [&] {
    // HDF5's collective calls cannot be interrupted: a rank stuck in one (a hung file
    // system) is caught by the watchdog instead.
    WaitScope wait("the collective checkpoint write (parallel HDF5)");
    write_checkpoint(path, c, prov, w.comm);
  });
  agreed(w, [&] {
    if (!run) return;
    run->mark_latest(c.state.step);
    run->prune(keep.keep_last, keep.keep_every, c.state.step);
  });
}

namespace {
// The steps `--resume auto` tries, in order: the one `latest` names, then the older ones.
// Each must carry the directory's run id (*lineage). Without a pointer (a crash before the
// first one was written, or a directory from before pointers): every checkpoint, newest
// first.
std::vector<int64_t> resume_order(const RunDirectory& run, std::ostream& out, std::string* lineage) {
  const std::vector<int64_t> steps = run.checkpoint_steps();
  const int64_t latest = run.latest_step();
  *lineage = run.run_id();
  if (latest < 0) {
    if (!steps.empty())
      out << "warning: '" << run.path() << "/checkpoints' has no readable 'latest' pointer; "
          << "trying its checkpoints newest first\n";
    return {steps.rbegin(), steps.rend()};
  }
  std::vector<int64_t> order{latest};
  for (auto s = steps.rbegin(); s != steps.rend(); ++s) {
    if (*s < latest) order.push_back(*s);
    if (*s > latest)
      out << "note: '" << run.checkpoint_path(*s) << "' is newer than what 'latest' names (a "
          << "crash before the pointer was written, or an abandoned branch): not resumed from\n";
  }
  return order;
}
}  // namespace

std::optional<TrainState> resume_checkpoint(const World& w, std::ostream& out,
                                            const ResumeRequest& req, std::string* used_path,
                                            RunLayout* saved_layout) {
  std::vector<std::string> candidates;
  std::string lineage;  // the run id every candidate must carry ("": take the first readable)
  if (req.how == "auto") {
    std::vector<int64_t> order;
    agreed(w, [&] {
      if (w.root()) order = resume_order(RunDirectory(req.run_dir, false), out, &lineage);
    });
    order = broadcast_ints(order, w.comm);
    lineage = broadcast_string(lineage, w.comm);
    for (int64_t s : order) candidates.push_back(RunDirectory::path_of(req.run_dir, s));
    if (candidates.empty()) return std::nullopt;
  } else {
    candidates.push_back(req.how);
  }
  std::string first_error;
  for (const std::string& path : candidates) {
    TrainState state;
    const std::string err = run_agreed(w, [&] {
      state = req.attributes_only
                  ? check_checkpoint_resumes(path, *req.config, req.run, saved_layout)
                  : read_checkpoint(path, *req.config, *req.layout, req.into, req.run, w.rank, req.rank,
                                    saved_layout);
      // (A checkpoint from before lineages carries none, and is taken.)
      if (!lineage.empty() && !state.run_id.empty() && state.run_id != lineage)
        fail("checkpoint '", path, "' belongs to another run (run id ",
             state.run_id.empty() ? "none" : state.run_id, ", this run's is ", lineage,
             "); a run resumes only from its own checkpoints");
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
