#include "io/checkpoint.hpp"

#include "common/error.hpp"
#include "io/atomic.hpp"
#include "io/model_schema.hpp"

namespace lct {

namespace {
constexpr const char* kAvg = "optimizer/exp_avg/";
constexpr const char* kAvgSq = "optimizer/exp_avg_sq/";

template <class Visit>
void for_each_state_field(TrainState& s, Visit&& v) {
  v("step", s.step);
  v("data_epoch", s.data_epoch);
  v("data_cursor", s.data_cursor);
  v("data_seed", s.data_seed);
  v("tokens_seen", s.tokens_seen);
  v("restarts", s.restarts);
}
}  // namespace

void write_checkpoint(const std::string& path, const CheckpointView& c, const Provenance& prov) {
  AtomicTarget target(path, true, "checkpoint");
  {
    h5::File f = h5::File::create(target.temp_path());
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
    TrainState s = c.state;
    for_each_state_field(s, [&](const char* name, int64_t v) { h5::write_attr(g, name, v); });
    h5::write_provenance(f, prov);
    g.reset();
    f.close();
  }
  target.commit();
}

TrainState read_checkpoint(const std::string& path, const ModelConfig& expected,
                           const ParamLayout& layout, float* params, float* exp_avg,
                           float* exp_avg_sq) {
  h5::File f = h5::File::open_read(path, "checkpoint");
  h5::check_kind(f, "checkpoint", {"checkpoint"}, kModelFormatVersion);
  const ModelConfig c = read_model_config(f);
  const auto mine = c.values(), wanted = expected.values();
  for (size_t i = 0; i < mine.size(); ++i)
    if (mine[i].second != wanted[i].second)
      fail("checkpoint '", path, "' was written for ", mine[i].first, " = ",
           to_string(mine[i].second), " but this run's model has ", to_string(wanted[i].second),
           "; resume with the model the checkpoint was made from");
  read_tensors(f, "", c, layout, params);
  read_tensors(f, kAvg, c, layout, exp_avg);
  read_tensors(f, kAvgSq, c, layout, exp_avg_sq);
  h5::Handle g = h5::open_group(f, "train_state");
  TrainState s;
  for_each_state_field(s, [&](const char* name, int64_t& v) {
    v = h5::read_int(g, name, h5::where(f, "train_state"));
  });
  return s;
}

}  // namespace lct
