// Evaluation: mean loss per valid target over the dataset packed in file order, and for
// passkey data the share of keys retrieved exactly, by depth of the hidden key.
//
// Exact retrieval is measured teacher-forced: the key is retrieved when the argmax at every
// answer position equals the true digit. That is exactly greedy decoding: greedy decoding
// produces the key iff each digit's argmax is right given the right digits before it.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "common/clock.hpp"
#include "model/llama.hpp"
#include "model/shard.hpp"

namespace lct {

// Passkey retrieval grouped by (document length, depth bucket of the key): the accuracy by
// depth x context length. A document's length is its token count (doc_offsets give it).
struct PasskeyTable {
  static constexpr int kBuckets = 5;  // key depth 0-20%, ..., 80-100% (passkey_depth_bucket)
  std::vector<int64_t> lengths;       // the lengths of the documents scored, ascending
  std::vector<int64_t> total, correct;  // [lengths.size() x kBuckets], row by row
  void add(int64_t length, double depth, bool retrieved);  // a new length gets its row
  void merge(const PasskeyTable& other);                   // adds other's counts, row by length
  static size_t at(size_t length_index, int bucket) { return length_index * kBuckets + size_t(bucket); }
  static double depth_edge(int k) { return double(k) / kBuckets; }  // k = 0..kBuckets
};

struct EvalResult {
  double loss_sum = 0;
  int64_t valid_targets = 0;
  int64_t correct = 0;  // valid targets whose argmax (greedy next token) is the target
  // Loss sum and targets by the predicting token's position in its document, in buckets
  // [0, 64), [64, 128), [128, 256), ... (does the loss fall as the context grows?).
  std::vector<double> position_loss;
  std::vector<int64_t> position_targets;
  static int64_t bucket_start(int k);
  int64_t sequences = 0;
  static constexpr int kBuckets = PasskeyTable::kBuckets;  // key depth 0-20%, ..., 80-100%
  int64_t asked[kBuckets] = {0}, retrieved[kBuckets] = {0};
  int64_t split_docs = 0;  // passkey documents longer than a sequence: not scored
  PasskeyTable passkey;    // asked/retrieved again, by document length too
  // Partial credit, for watching retrieval being learnt: answer tokens by their place in the
  // answer (0 = the first digit), and how many of them had the right argmax.
  std::vector<int64_t> answer_tokens, answer_right;
  // Keys in which a symbol occurs more than once ("92225"), asked and retrieved: a copy
  // circuit that finds its place in the key by the last symbol alone fails on these (after
  // "922" it cannot tell which 2 it is at), so their share of the errors tells that apart
  // from not finding the key at all. The other keys are keys_asked() - repeat_asked.
  int64_t repeat_asked = 0, repeat_retrieved = 0;
  double mean_loss() const { return valid_targets ? loss_sum / double(valid_targets) : 0.0; }
  int64_t keys_asked() const;      // over every depth
  int64_t keys_retrieved() const;
  // Adds another part's counts (EvalShare): the parts of one evaluation merged in any order
  // give the whole one's counts; the loss sums differ only by the order of the additions.
  void merge(const EvalResult& other);
  // Every field as one array of numbers (counts are exact in a double up to 2^53), for
  // passing a part between ranks, and back.
  std::vector<double> to_numbers() const;
  static EvalResult from_numbers(const std::vector<double>& v);
};

// Data parallelism: `parts` replicas share the batches, batch k going to replica k % parts,
// and each returns its part's result (EvalResult::merge adds them up). Every replica makes
// the same number of forward passes (the last round's spare replicas pass the first batch
// again, uncounted): a model whose forward pass spans the replicas (ZeRO-3's parameter
// gathers) must not wait for a pass that never comes.
struct EvalShare {
  int64_t parts = 1, part = 0;
};

// Sequences done so far and in all, after each forward pass (for progress lines).
using EvalProgress = std::function<void(int64_t done, int64_t total)>;

// Context parallelism: every batch cut over `ranks` ranks (this one `rank`), the model's
// attention spanning them; the sum over the ranks and the gather of every rank's argmax
// rows (rank after rank) are the caller's (MPI). `group`: the cp ranks of one Ulysses group
// (train --cp-algo hybrid), which shard_batch keeps together.
struct EvalCp {
  int64_t ranks = 1, rank = 0;
  CpSplit split = CpSplit::Zigzag;
  int64_t group = 1;
  std::function<double(double)> sum;
  std::function<std::vector<int32_t>(const std::vector<int32_t>& mine)> allgather;
};

// Runs over the packed sequences [0, max_sequences) (all when 0), B at a time: with `share`,
// only this replica's batches. With cp, every rank of the cp group returns the same result.
// Reads only the evaluated sequences' tokens from `data`.
// Loss weights, a training choice, are not applied: the loss is the mean over every target.
EvalResult evaluate(LlamaModel& model, TokenSource& data, int64_t seq_len, int64_t B,
                    int64_t max_sequences, PhaseClock& clock, const EvalProgress& progress = {},
                    const EvalCp& cp = {}, const EvalShare& share = {});

}  // namespace lct
