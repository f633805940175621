// A context-length curriculum inside one run (--seq-len-schedule): stages at shorter lengths
// before --seq-len, each with its own packing of the data. The learning-rate schedule spans
// the whole run; --batch-size stays sequences per micro-batch, so a stage's tokens per step
// scale with its length.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "train/data_loader.hpp"

namespace lct {

struct SeqLenStage {
  int64_t seq_len, first_step, last_step;  // steps [first_step, last_step], 1-based
};

class SeqLenSchedule {
 public:
  // `text` "LEN:STEPS,LEN:STEPS,..." (--seq-len-schedule; "" = one stage) lists the stages
  // before the last, which trains at `seq_len` to `steps`. Refuses, with the fix: a
  // malformed entry, lengths below 2, not increasing or not below --seq-len, counts below 1,
  // or stages leaving the last none of --steps.
  SeqLenSchedule(const std::string& text, int64_t seq_len, int64_t steps);
  const std::vector<SeqLenStage>& stages() const { return stages_; }
  bool staged() const { return stages_.size() > 1; }
  // The stage of `step`; steps past the last stage's end (a run's step + 1 after its last
  // step) belong to the last stage.
  size_t stage_of(int64_t step) const;
  int64_t seq_len_at(int64_t step) const { return stages_[stage_of(step)].seq_len; }
  // Canonical "512:200,1024:100" (the stages before the last, as given; "" = one stage): a
  // run resumes only with the same one.
  std::string text() const;
  // "512 for steps 1-200, 1024 for 201-300, 2048 for 301-1000".
  std::string describe() const;

 private:
  std::vector<SeqLenStage> stages_;
};

// The data of a (staged) run: one DataLoader at a time, at the length of the current stage,
// over the same dataset and seed. A stage starts its own order at (epoch 0, cursor 0); the
// position a checkpoint records is that of the loader of the step after it, so a checkpoint
// at a stage boundary records the next stage's start. The same steps thus see the same
// sequences however a run is stopped and resumed.
class StagedData {
 public:
  StagedData(const DatasetInfo& ds, const SeqLenSchedule& schedule, uint64_t seed);
  // The loader of `step` (1-based): a new one, at (0, 0), when `step` enters another stage.
  DataLoader& at(int64_t step);
  size_t stage() const { return stage_; }

 private:
  const DatasetInfo& ds_;  // offsets only: the loaders pack documents, batches read tokens
  const SeqLenSchedule& schedule_;
  uint64_t seed_;
  size_t stage_ = 0;
  std::unique_ptr<DataLoader> loader_;
};

}  // namespace lct
