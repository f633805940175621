#include "io/checkpoint.hpp"

#include <algorithm>
#include <optional>

#include "common/knobs.hpp"
#include "common/error.hpp"
#include "common/finite.hpp"
#include "io/atomic.hpp"
#include "io/file_kind.hpp"
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
  v("dp", l.plan.dp);
  v("cp", l.plan.cp);
  v("seq_len", l.seq_len);
  v("batch_size", l.batch_size);
  v("grad_accum", l.grad_accum);
}

constexpr const char* kRankColumns = "dp_rank, cp_rank, data_epoch, data_cursor";
constexpr int64_t kRankColumnCount = 4;
std::vector<int64_t> rank_row(const RankState& r) { return {r.dp_rank, r.cp_rank, r.data_epoch, r.data_cursor}; }

// Tensor i of `a`: this rank's blocks of it (none where it owns nothing of it, or it is
// replicated over tp and this is not tp rank 0), written collectively.
void write_part(const h5::File& f, const std::string& name, size_t i, const ParamLayout& whole,
                const CheckpointParts& p, const ArrayPart& a) {
  const TensorSpec& w = whole.tensors[i];
  const TensorSpec& l = p.local->tensors.at(i);
  std::vector<h5::Block> blocks;
  const bool writes = p.tp.rank == 0 || tp_cut(w) != TpCut::Replicated;
  size_t at = 0;  // where range r starts in a.data
  for (const Shard& r : a.ranges) {
    const size_t lo = std::max(r.begin, l.offset), hi = std::min(r.end, l.offset + l.numel);
    if (writes && lo < hi) {
      size_t m = at + (lo - r.begin);
      for (const TensorBlock& b : tp_blocks(w, l, p.tp, lo - l.offset, hi - l.offset)) {
        blocks.push_back({b.row, b.col, b.rows, b.cols, m});
        m += size_t(b.rows * b.cols);
      }
    }
    at += r.size();
  }
  h5::write_blocks(f, f.h, name, w.shape, a.data, blocks);
}

// Everything but the file's creation and commit. `rows`: every rank's row of ranks/state
// (rank after rank) where one rank writes the file alone; empty: each rank writes its own.
void write_contents(const h5::File& f, const CheckpointView& c, const CheckpointParts& p,
                    const Provenance& prov, const std::vector<int64_t>& rows) {
  h5::write_kind(f, "checkpoint", kModelFormatVersion);
  write_model_config(f, *c.config);
  const ParamLayout& whole = *c.layout;
  for (size_t i = 0; i < whole.tensors.size(); ++i)
    write_part(f, whole.tensors[i].name, i, whole, p, p.params);
  h5::create_group(f, f.h, "optimizer");
  h5::create_group(f, f.h, "optimizer/exp_avg");
  h5::create_group(f, f.h, "optimizer/exp_avg_sq");
  for (size_t i = 0; i < whole.tensors.size(); ++i) {
    write_part(f, kAvg + whole.tensors[i].name, i, whole, p, p.exp_avg);
    write_part(f, kAvgSq + whole.tensors[i].name, i, whole, p, p.exp_avg_sq);
  }
  h5::Handle g = h5::create_group(f, f.h, "train_state");
  for_each_state_field(c.state, [&](const char* name, int64_t v) { h5::write_attr(g, name, v); });
  for_each_layout_field(c.run, [&](const char* name, int64_t v) { h5::write_attr(g, name, v); });
  h5::write_attr(g, "run_id", c.state.run_id);
  h5::write_attr(g, "data_documents", c.state.data.documents);
  h5::write_attr(g, "data_tokens", c.state.data.tokens);
  h5::write_attr(g, "data_fingerprint", c.state.data.fingerprint);
  h5::write_attr(g, "data_source", c.state.data.source);
  h5::write_attr(g, "seq_len_schedule", c.run.seq_len_schedule);
  h5::write_attr(g, "packing_rule", c.state.packing_rule);
  h5::write_attr(g, "attention_kernel", c.state.attention_kernel);
  const InitOrigin& o = c.state.init_from;
  h5::write_attr(g, "init_from", o.path);
  h5::write_attr(g, "init_from_step", o.step);
  h5::write_attr(g, "init_from_run_id", o.run_id);
  h5::write_attr(g, "init_from_data_fingerprint", o.data.fingerprint);
  h5::write_attr(g, "init_from_data_source", o.data.source);
  if (!c.state.tokenizer.name.empty()) write_tokenizer_group(f, c.state.tokenizer);
  h5::Handle r = h5::create_group(f, f.h, "ranks");
  if (rows.empty())
    h5::write_rank_rows(f, r, "state", rank_row(c.rank));
  else
    h5::write_array(f, r, "state", rows.data(), {int64_t(rows.size()) / kRankColumnCount, kRankColumnCount});
  h5::Handle d(H5Dopen2(r, "state", H5P_DEFAULT), H5Dclose);
  h5::write_attr(d, "columns", std::string(kRankColumns));
  h5::write_provenance(f, prov);
}

// Tensor i of `a`: this rank's blocks of it (the same as write_part's, but every rank reads
// all it keeps, replicated tensors included), read straight into a.data after checking the
// dataset's dtype and shape. Returns how many of the values read are not finite.
NonFinite read_part(const h5::File& f, const std::string& name, size_t i, const ModelConfig& config,
                    const ParamLayout& whole, const CheckpointTargets& p, const ArrayTarget& a) {
  const TensorSpec& w = whole.tensors[i];
  const TensorSpec& l = p.local->tensors.at(i);
  check_tensor(f, name, w, config);
  std::vector<h5::Block> blocks;
  std::vector<std::pair<size_t, size_t>> runs;  // [at, at + n) of a.data read here
  size_t at = 0;  // where range r starts in a.data
  for (const Shard& r : a.ranges) {
    const size_t lo = std::max(r.begin, l.offset), hi = std::min(r.end, l.offset + l.numel);
    if (lo < hi) {
      size_t m = at + (lo - r.begin);
      runs.push_back({m, hi - lo});
      for (const TensorBlock& b : tp_blocks(w, l, p.tp, lo - l.offset, hi - l.offset)) {
        blocks.push_back({b.row, b.col, b.rows, b.cols, m});
        m += size_t(b.rows * b.cols);
      }
    }
    at += r.size();
  }
  h5::read_blocks(f, f.h, name, w.shape, a.data, blocks);
  NonFinite bad;
  for (const auto& [start, n] : runs) {
    const NonFinite c = count_non_finite(a.data + start, n);
    bad.nan += c.nan;
    bad.inf += c.inf;
  }
  return bad;
}

// Every tensor of `a` under `prefix`; the counts of non-finite values read, per tensor.
std::vector<NonFinite> read_parts(const h5::File& f, const std::string& prefix, const ModelConfig& config,
                                  const ParamLayout& whole, const CheckpointTargets& p,
                                  const ArrayTarget& a) {
  std::vector<NonFinite> bad;
  for (size_t i = 0; i < whole.tensors.size(); ++i)
    bad.push_back(read_part(f, prefix + whole.tensors[i].name, i, config, whole, p, a));
  return bad;
}

CheckpointTargets whole_targets(const ParamLayout& layout, float* p, float* m, float* v) {
  const std::vector<Shard> all{{0, layout.total}};
  return {&layout, {1, 0}, {p, p ? all : std::vector<Shard>{}}, {m, m ? all : std::vector<Shard>{}},
          {v, v ? all : std::vector<Shard>{}}};
}

TrainState read_state(const h5::Handle& g, const std::string& w) {
  TrainState s;
  for_each_state_field(s, [&](const char* name, int64_t& v) { v = h5::read_int(g, name, w); });
  // Checkpoints from before lineages, data identities and origins have none: "" (unknown).
  if (h5::has_attr(g, "run_id")) s.run_id = h5::read_string(g, "run_id", w);
  s.packing_rule = h5::has_attr(g, "packing_rule") ? h5::read_int(g, "packing_rule", w) : 1;
  if (h5::has_attr(g, "attention_kernel")) s.attention_kernel = h5::read_string(g, "attention_kernel", w);
  if (h5::has_attr(g, "data_fingerprint"))
    s.data = {h5::read_int(g, "data_documents", w), h5::read_int(g, "data_tokens", w),
              h5::read_string(g, "data_fingerprint", w), h5::read_string(g, "data_source", w)};
  if (h5::has_attr(g, "init_from")) {
    InitOrigin& o = s.init_from;
    o.path = h5::read_string(g, "init_from", w);
    o.step = h5::read_int(g, "init_from_step", w);
    o.run_id = h5::read_string(g, "init_from_run_id", w);
    o.data.fingerprint = h5::read_string(g, "init_from_data_fingerprint", w);
    o.data.source = h5::read_string(g, "init_from_data_source", w);
  }
  return s;
}
}  // namespace

double checkpoint_bytes(const ParamLayout& layout) {
  // Three float arrays, plus chunk checksums, indexes, attributes and provenance.
  return 1.02 * 3.0 * 4.0 * double(layout.total) + double(1 << 20);
}

namespace {
bool owns_a_part(const CheckpointParts& p) {
  for (const ArrayPart* a : {&p.params, &p.exp_avg, &p.exp_avg_sq})
    for (const Shard& r : a->ranges)
      if (r.size() > 0) return true;
  return false;
}

// Whether rank 0 alone holds every entry (the parameters and moments replicated over the
// ranks: no tp, no ZeRO sharding), the ranks' parts covering every tensor between them.
// Collective.
bool rank0_owns_everything(const CheckpointView& c, MPI_Comm comm, int rank) {
  int others = rank != 0 && c.parts && owns_a_part(*c.parts) ? 1 : 0;  // whole arrays: rank 0's
  MPI_Allreduce(MPI_IN_PLACE, &others, 1, MPI_INT, MPI_MAX, comm);
  return others == 0;
}

// Rank 0 writes the file alone, through HDF5's serial driver, with every rank's row: a
// collective write would cost each tensor several rounds between the ranks (hundreds for a
// checkpoint, each a network round trip across nodes) for ranks that write nothing.
void write_alone(const std::string& path, const CheckpointView& c, const Provenance& prov, MPI_Comm comm,
                 int rank) {
  const std::vector<int64_t> mine = rank_row(c.rank);
  std::vector<int64_t> rows(mine.size() * size_t(rank == 0 ? comm_size(comm) : 0));
  MPI_Gather(mine.data(), int(mine.size()), MPI_INT64_T, rows.data(), int(mine.size()), MPI_INT64_T, 0, comm);
  std::string error;
  if (rank == 0) {
    try {
      AtomicTarget target(path, true, "checkpoint");
      {
        h5::File f = h5::File::create(target, checkpoint_bytes(*c.layout), "checkpoint", run_dir_space_advice());
        const std::vector<Shard> all{{0, c.layout->total}};
        const CheckpointParts whole{c.layout, {1, 0}, {c.params, all}, {c.exp_avg, all},
                                    {c.exp_avg_sq, all}, c.params, c.layout->total};
        write_contents(f, c, c.parts ? *c.parts : whole, prov, rows);
        f.close();
      }
      target.commit();
    } catch (const Error& e) {
      error = e.what();
    }
  }
  error = broadcast_string(error, comm);  // every rank returns once the file is in place, or throws
  if (!error.empty()) throw Error(error);
}
}  // namespace

void write_checkpoint(const std::string& path, const CheckpointView& c, const Provenance& prov,
                      MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank0_owns_everything(c, comm, rank)) return write_alone(path, c, prov, comm, rank);
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
    if (target) reserve_space(f.path, checkpoint_bytes(*c.layout), "checkpoint", path, run_dir_space_advice());
  });
  write_contents(f, c, *c.parts, prov, {});
  h5::agree_on(f, [&] { f.close(); });  // collective: the metadata is written here
  h5::agree_on(f, [&] {  // rank 0 renames; every rank returns once the file is in place
    if (!target) return;
    release_reserve(target->temp_path());
    target->commit();
  });
}

namespace {

// What a resume keeps, checked against the checkpoint's attributes: the model config, the
// sequence length and the schedule (the data position counts sequences of that length).
// Fills *saved with the checkpoint's run layout; returns its training state.
TrainState check_resumable(const h5::File& f, const std::string& path, const ModelConfig& expected,
                           const RunLayout& run, RunLayout* saved) {
  const ModelConfig c = read_model_config(f);
  const auto mine = c.values(), wanted = expected.values();
  for (size_t i = 0; i < mine.size(); ++i)
    if (mine[i].second != wanted[i].second)
      fail("checkpoint '", path, "' was written for ", mine[i].first, " = ",
           to_string(mine[i].second), " but this run's model has ", to_string(wanted[i].second),
           "; resume with the model the checkpoint was made from");
  h5::Handle g = h5::open_group(f, "train_state");
  const std::string w = h5::where(f, "train_state");
  for_each_layout_field(*saved, [&](const char* name, int64_t& v) { v = h5::read_int(g, name, w); });
  if (saved->seq_len != run.seq_len)
    fail("checkpoint '", path, "' was written with seq_len = ", saved->seq_len, " but this run has ",
         run.seq_len, "; a resume keeps the sequence length (its data position counts sequences of ",
         "that length): resume with ", knob_name(Knob::SeqLen), " ", saved->seq_len, ", or start a new run from it with ",
         knob_name(Knob::InitFrom));
  // Checkpoints from before schedules have none: "" (one length).
  saved->seq_len_schedule =
      h5::has_attr(g, "seq_len_schedule") ? h5::read_string(g, "seq_len_schedule", w) : "";
  if (saved->seq_len_schedule != run.seq_len_schedule)
    fail("checkpoint '", path, "' was written with ", knob_name(Knob::SeqLenSchedule), " '", saved->seq_len_schedule,
         "' but this run has '", run.seq_len_schedule, "'; resume with the same schedule");
  TrainState s = read_state(g, w);
  s.tokenizer = read_tokenizer_group(f);
  return s;
}

}  // namespace

TrainState check_checkpoint_resumes(const std::string& path, const ModelConfig& expected, const RunLayout& run,
                                    RunLayout* saved) {
  h5::File f = h5::File::open_read(path, "checkpoint");
  h5::check_kind(f, "checkpoint", {"checkpoint"}, kModelFormatVersion);
  return check_resumable(f, path, expected, run, saved);
}

TrainState read_checkpoint(const std::string& path, const ModelConfig& expected,
                           const ParamLayout& layout, const CheckpointTargets& out,
                           const RunLayout& run, int world_rank, const RankState& rank,
                           RunLayout* saved) {
  h5::File f = h5::File::open_read(path, "checkpoint");
  h5::check_kind(f, "checkpoint", {"checkpoint"}, kModelFormatVersion);
  TrainState s = check_resumable(f, path, expected, run, saved);

  const h5::ArrayInfo info = h5::array_info(f, f.h, "ranks/state");
  if (info.shape != std::vector<int64_t>{saved->world_size, 4} || info.type_class != H5T_INTEGER)
    fail(h5::where(f, "ranks/state"), ": shape ", h5::shape_str(info.shape), ", expected [",
         saved->world_size, ", 4]; the file is damaged");
  std::vector<int64_t> rows(size_t(info.numel()));
  h5::read_array(f, f.h, "ranks/state", rows.data());
  // Under the same layout every rank must find its own row (a relaunch that reorders the
  // ranks would otherwise go unnoticed); under another one the rows describe other ranks.
  const int64_t* row = &rows[size_t(4 * world_rank)];
  if (*saved == run && (row[0] != rank.dp_rank || row[1] != rank.cp_rank || row[2] != s.data_epoch ||
                        row[3] != s.data_cursor))
    fail("checkpoint '", path, "': rank ", world_rank, " was at (dp ", row[0], ", cp ", row[1],
         ") with data at ", row[2], ":", row[3], " but is now at (dp ", rank.dp_rank, ", cp ",
         rank.cp_rank, ") with the run at ", s.data_epoch, ":", s.data_cursor,
         "; the ranks must keep their places to resume: launch the same way as before");

  // The checkpoint's config equals `expected` (check_resumable).
  const auto bad_p = read_parts(f, "", expected, layout, out, out.params);
  const auto bad_m = read_parts(f, kAvg, expected, layout, out, out.exp_avg);
  const auto bad_v = read_parts(f, kAvgSq, expected, layout, out, out.exp_avg_sq);
  check_finite_counts(f, "", layout, bad_p);
  check_finite_counts(f, kAvg, layout, bad_m);
  check_finite_counts(f, kAvgSq, layout, bad_v);
  return s;
}

TrainState read_checkpoint(const std::string& path, const ModelConfig& expected,
                           const ParamLayout& layout, const CheckpointBuffers& out,
                           const RunLayout& run, int world_rank, const RankState& rank,
                           RunLayout* saved) {
  return read_checkpoint(path, expected, layout,
                         whole_targets(layout, out.params, out.exp_avg, out.exp_avg_sq), run,
                         world_rank, rank, saved);
}

std::optional<TrainState> read_checkpoint_state(const std::string& path) {
  h5::File f = h5::File::open_read(path, "model file or checkpoint");
  if (!h5::has_attr(f.h, kFileKindAttr) || h5::read_string(f.h, kFileKindAttr, path) != "checkpoint")
    return std::nullopt;
  h5::check_kind(f, "checkpoint", {"checkpoint"}, kModelFormatVersion);
  return read_state(h5::open_group(f, "train_state"), h5::where(f, "train_state"));
}

void read_checkpoint_moments(const std::string& path, const ParamLayout& layout,
                             const CheckpointTargets& out) {
  h5::File f = h5::File::open_read(path, "checkpoint");
  h5::check_kind(f, "checkpoint", {"checkpoint"}, kModelFormatVersion);
  const ModelConfig c = read_model_config(f);
  const auto bad_m = read_parts(f, kAvg, c, layout, out, out.exp_avg);
  const auto bad_v = read_parts(f, kAvgSq, c, layout, out, out.exp_avg_sq);
  check_finite_counts(f, kAvg, layout, bad_m);
  check_finite_counts(f, kAvgSq, layout, bad_v);
}

void read_checkpoint_moments(const std::string& path, const ParamLayout& layout, float* exp_avg,
                             float* exp_avg_sq) {
  read_checkpoint_moments(path, layout, whole_targets(layout, nullptr, exp_avg, exp_avg_sq));
}

}  // namespace lct
