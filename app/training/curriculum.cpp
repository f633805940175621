#include "app/training/curriculum.hpp"

#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "common/error.hpp"

namespace lct {

namespace {
// A positive decimal integer, the whole of `s`; -1 otherwise.
int64_t whole_number(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return -1;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), nullptr, 10);
  return errno == ERANGE ? -1 : int64_t(v);
}
}  // namespace

SeqLenSchedule::SeqLenSchedule(const std::string& text, int64_t seq_len, int64_t steps) {
  const std::string how = "; write LEN:STEPS stages, comma-separated, shortest first, e.g. "
                          "--seq-len-schedule 512:200,1024:100 (the last stage, at --seq-len, "
                          "runs to --steps)";
  int64_t next = 1;  // first step of the next stage
  std::istringstream in(text);
  for (std::string item; !text.empty() && std::getline(in, item, ',');) {
    const size_t colon = item.find(':');
    const int64_t len = whole_number(item.substr(0, colon));
    const int64_t n = colon == std::string::npos ? -1 : whole_number(item.substr(colon + 1));
    if (colon == std::string::npos || len < 0 || n < 0)
      fail("--seq-len-schedule '", text, "': '", item, "' is not LEN:STEPS", how);
    if (len < 2) fail("--seq-len-schedule '", text, "': length ", len, " is too short (at least 2)");
    if (n < 1) fail("--seq-len-schedule '", text, "': stage ", item, " has no steps (at least 1)");
    if (!stages_.empty() && len <= stages_.back().seq_len)
      fail("--seq-len-schedule '", text, "': length ", len, " does not grow from ",
           stages_.back().seq_len, "; a curriculum goes from short to long sequences", how);
    if (len >= seq_len)
      fail("--seq-len-schedule '", text, "': length ", len, " is not below --seq-len ", seq_len,
           ", the length of the last stage", how);
    stages_.push_back({len, next, next + n - 1});
    next += n;
  }
  if (!text.empty() && (stages_.empty() || text.back() == ','))
    fail("--seq-len-schedule '", text, "' has an empty stage", how);
  if (next > steps)
    fail("--seq-len-schedule '", text, "' takes ", next - 1, " steps before --seq-len ", seq_len,
         ", leaving none of --steps ", steps, " for it; raise --steps or shorten the stages");
  stages_.push_back({seq_len, next, steps});
}

size_t SeqLenSchedule::stage_of(int64_t step) const {
  for (size_t s = 0; s + 1 < stages_.size(); ++s)
    if (step <= stages_[s].last_step) return s;
  return stages_.size() - 1;
}

std::string SeqLenSchedule::text() const {
  std::string s;
  for (size_t i = 0; i + 1 < stages_.size(); ++i)
    s += cat(i ? "," : "", stages_[i].seq_len, ":", stages_[i].last_step - stages_[i].first_step + 1);
  return s;
}

std::string SeqLenSchedule::describe() const {
  std::string s;
  for (const SeqLenStage& st : stages_)
    s += cat(s.empty() ? "" : ", ", st.seq_len, " for ", s.empty() ? "steps " : "", st.first_step,
             "-", st.last_step);
  return s;
}

StagedData::StagedData(const DatasetInfo& ds, const SeqLenSchedule& schedule, uint64_t seed)
    : ds_(ds), schedule_(schedule), seed_(seed) {}

DataLoader& StagedData::at(int64_t step) {
  const size_t s = schedule_.stage_of(step);
  if (!loader_ || s != stage_) {
    loader_.reset();  // the previous stage's packing goes first
    loader_ = std::make_unique<DataLoader>(ds_, schedule_.stages()[s].seq_len, seed_);
    stage_ = s;
  }
  return *loader_;
}

}  // namespace lct
