#include "io/checkpoint.hpp"

#include <optional>

#include "common/error.hpp"
#include "io/atomic.hpp"
#include "io/model_schema.hpp"
#include "io/tokenizer_group.hpp"
#include "parallel/world.hpp"

namespace lct {

namespace {
constexpr const char* kAvg = "optimizer/exp_avg/";
constexpr const char* kAvgSq = "optimizer/exp_avg_sq/";

template <class State, class Visit>
void for_each_state_field(State& s, Visit&& v) {
  v("step", s.step);
  v("data_epoch", s.data_epoch);
  v("data_cursor", s.data_cursor);
  v("data_seed", s.data_seed);
  v("tokens_seen", s.tokens_seen);
  v("restarts", s.restarts);
  v("skipped_steps", s.skipped_steps);
  v("consecutive_skips", s.consecutive_skips);
}

template <class Layout, class Visit>
void for_each_layout_field(Layout& l, Visit&& v) {
  v("world_size", l.world_size);
  v("dp", l.dp);
  v("cp", l.cp);
  v("seq_len", l.seq_len);
  v("batch_size", l.batch_size);
  v("grad_accum", l.grad_accum);
}

constexpr const char* kRankColumns = "dp_rank, cp_rank, data_epoch, data_cursor";

void write_contents(const h5::File& f, const CheckpointView& c, const Provenance& prov) {
  h5::write_kind(f, "checkpoint", kModelFormatVersion);
  write_model_contents(f, f.h, "", *c.config, *c.layout, c.params);
  h5::create_group(f, f.h, "optimizer");
  h5::create_group(f, f.h, "optimizer/exp_avg");
  h5::create_group(f, f.h, "optimizer/exp_avg_sq");
  for (const TensorSpec& t : c.layout->tensors) {
    h5::write_array(f, f.h, kAvg + t.name, c.exp_avg + t.offset, t.shape);
    h5::write_array(f, f.h, kAvgSq + t.name, c.exp_avg_sq + t.offset, t.shape);
  }
  h5::Handle g = h5::create_group(f, f.h, "train_state");
  for_each_state_field(c.state, [&](const char* name, int64_t v) { h5::write_attr(g, name, v); });
  for_each_layout_field(c.run, [&](const char* name, int64_t v) { h5::write_attr(g, name, v); });
  h5::write_attr(g, "run_id", c.state.run_id);
  h5::write_attr(g, "data_documents", c.state.data.documents);
  h5::write_attr(g, "data_tokens", c.state.data.tokens);
  h5::write_attr(g, "data_fingerprint", c.state.data.fingerprint);
  h5::write_attr(g, "data_source", c.state.data.source);
  if (!c.state.tokenizer.name.empty()) write_tokenizer_group(f, c.state.tokenizer);
  h5::Handle r = h5::create_group(f, f.h, "ranks");
  h5::write_rank_rows(f, r, "state",
                      {c.rank.dp_rank, c.rank.cp_rank, c.rank.data_epoch, c.rank.data_cursor});
  h5::Handle d(H5Dopen2(r, "state", H5P_DEFAULT), H5Dclose);
  h5::write_attr(d, "columns", std::string(kRankColumns));
  h5::write_provenance(f, prov);
}
}  // namespace

double checkpoint_bytes(const ParamLayout& layout) {
  // Three float arrays, plus chunk checksums, indexes, attributes and provenance.
  return 1.02 * 3.0 * 4.0 * double(layout.total) + double(1 << 20);
}

void write_checkpoint(const std::string& path, const CheckpointView& c, const Provenance& prov,
                      MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  // Rank 0 owns the temporary name and the final rename; the others learn the name, or
  // the reason it cannot be written, before any collective HDF5 call.
  std::optional<AtomicTarget> target;
  std::string temp_or_error;
  if (rank == 0) {
    try {
      target.emplace(path, true, "checkpoint");
      temp_or_error = "ok:" + target->temp_path();
    } catch (const Error& e) {
      temp_or_error = e.what();
    }
  }
  temp_or_error = broadcast_string(temp_or_error, comm);
  if (temp_or_error.rfind("ok:", 0) != 0) throw Error(temp_or_error);

  // Every failure below is agreed, so all ranks leave together: `f` then discards the
  // temporary file (collectively, in its destructor) and `target` deletes it.
  h5::File f = h5::File::create_parallel(temp_or_error.substr(3), comm);
  // The disk space first, on rank 0: HDF5 itself cannot fail a collective write on one
  // rank without stranding the others inside it.
  h5::agree_on(f, [&] {
    if (target) reserve_space(f.path, checkpoint_bytes(*c.layout), "checkpoint", path, kRunDirSpaceAdvice);
  });
  write_contents(f, c, prov);
  h5::agree_on(f, [&] { f.close(); });  // collective: the metadata is written here
  h5::agree_on(f, [&] {  // rank 0 renames; every rank returns once the file is in place
    if (!target) return;
    release_reserve(target->temp_path());
    target->commit();
  });
}

TrainState read_checkpoint(const std::string& path, const ModelConfig& expected,
                           const ParamLayout& layout, const CheckpointBuffers& out,
                           const RunLayout& run, int world_rank, const RankState& rank) {
  h5::File f = h5::File::open_read(path, "checkpoint");
  h5::check_kind(f, "checkpoint", {"checkpoint"}, kModelFormatVersion);
  const ModelConfig c = read_model_config(f);
  const auto mine = c.values(), wanted = expected.values();
  for (size_t i = 0; i < mine.size(); ++i)
    if (mine[i].second != wanted[i].second)
      fail("checkpoint '", path, "' was written for ", mine[i].first, " = ",
           to_string(mine[i].second), " but this run's model has ", to_string(wanted[i].second),
           "; resume with the model the checkpoint was made from");
  h5::Handle g = h5::open_group(f, "train_state");
  const std::string w = h5::where(f, "train_state");
  for_each_layout_field(run, [&](const char* name, int64_t want) {
    const int64_t had = h5::read_int(g, name, w);
    if (had != want)
      fail("checkpoint '", path, "' was written with ", name, " = ", had, " but this run has ",
           want, "; resume with the same parallel degrees and batch shape (or start a new run)");
  });
  TrainState s;
  for_each_state_field(s, [&](const char* name, int64_t& v) { v = h5::read_int(g, name, w); });
  // Checkpoints from before lineages and data identities have neither: "" (unknown).
  if (h5::has_attr(g, "run_id")) s.run_id = h5::read_string(g, "run_id", w);
  if (h5::has_attr(g, "data_fingerprint"))
    s.data = {h5::read_int(g, "data_documents", w), h5::read_int(g, "data_tokens", w),
              h5::read_string(g, "data_fingerprint", w), h5::read_string(g, "data_source", w)};

  s.tokenizer = read_tokenizer_group(f);

  const h5::ArrayInfo info = h5::array_info(f, f.h, "ranks/state");
  if (info.shape != std::vector<int64_t>{run.world_size, 4} || info.type_class != H5T_INTEGER)
    fail(h5::where(f, "ranks/state"), ": shape ", h5::shape_str(info.shape), ", expected [",
         run.world_size, ", 4]; the file is damaged");
  std::vector<int64_t> rows(size_t(info.numel()));
  h5::read_array(f, f.h, "ranks/state", rows.data());
  const int64_t* row = &rows[size_t(4 * world_rank)];
  if (row[0] != rank.dp_rank || row[1] != rank.cp_rank || row[2] != s.data_epoch ||
      row[3] != s.data_cursor)
    fail("checkpoint '", path, "': rank ", world_rank, " was at (dp ", row[0], ", cp ", row[1],
         ") with data at ", row[2], ":", row[3], " but is now at (dp ", rank.dp_rank, ", cp ",
         rank.cp_rank, ") with the run at ", s.data_epoch, ":", s.data_cursor,
         "; the ranks must keep their places to resume: launch the same way as before");

  read_tensors(f, "", c, layout, out.params);
  read_tensors(f, kAvg, c, layout, out.exp_avg);
  read_tensors(f, kAvgSq, c, layout, out.exp_avg_sq);
  check_finite_tensors(f, "", layout, out.params);
  check_finite_tensors(f, kAvg, layout, out.exp_avg);
  check_finite_tensors(f, kAvgSq, layout, out.exp_avg_sq);
  return s;
}

}  // namespace lct
