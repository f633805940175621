#include "train/evaluate.hpp"

#include <algorithm>
#include <cstring>
#include <set>

#include "data/passkey.hpp"

namespace lct {

namespace {
// Every rank's rows of a per-token array, put back in the whole batch's order (`full`).
template <class T>
void gather_rows(const Batch& b, const EvalCp& cp, const std::vector<T>& mine, T* full) {
  static_assert(sizeof(T) == sizeof(int32_t));
  std::vector<int32_t> bits(mine.size());
  std::memcpy(bits.data(), mine.data(), mine.size() * sizeof(T));
  const std::vector<int32_t> all = cp.allgather(bits);  // rank after rank, Tl each
  for (int64_t r = 0; r < cp.ranks; ++r) {
    const std::vector<int64_t> rows = shard_indices(b.B, b.S, cp.ranks, r, cp.split, cp.group);
    for (size_t i = 0; i < rows.size(); ++i) std::memcpy(&full[rows[i]], &all[size_t(r) * mine.size() + i], sizeof(T));
  }
}

// The model's forward pass over `b`, on this rank's shard when cp: the loss sum over every
// rank's tokens; the argmax and the loss of every token of the whole batch.
double forward(LlamaModel& model, Batch b, int64_t B, const EvalCp& cp, PhaseClock& clock, int32_t* argmax,
               float* token_loss) {
  if (cp.ranks == 1) return model.forward(b, clock, argmax, token_loss);
  // The ring's blocks are B sequences' shards: a last, shorter batch is padded to B.
  for (int64_t t = b.B * b.S; t < B * b.S; ++t) {
    b.tokens.push_back(0);
    b.targets.push_back(-1);
    b.doc.push_back(-1);
    b.idx.push_back(int32_t(t));
    b.pos.push_back(0);
  }
  b.B = B;
  const Batch mine = shard_batch(b, cp.ranks, cp.rank, cp.split, cp.group);
  std::vector<int32_t> local(mine.tokens.size());
  std::vector<float> local_loss(mine.tokens.size());
  const double loss = cp.sum(model.forward(mine, clock, local.data(), local_loss.data()));
  gather_rows(b, cp, local, argmax);
  gather_rows(b, cp, local_loss, token_loss);
  return loss;
}

// Position buckets: [0, 64), then doubling ([64, 128), [128, 256), ...).
int position_bucket(int32_t pos) {
  int k = 0;
  for (int64_t edge = 64; pos >= edge; edge *= 2) ++k;
  return k;
}
}  // namespace

void PasskeyTable::add(int64_t length, double depth, bool retrieved) {
  const auto it = std::lower_bound(lengths.begin(), lengths.end(), length);
  const size_t row = size_t(it - lengths.begin());
  if (it == lengths.end() || *it != length) {
    lengths.insert(it, length);
    total.insert(total.begin() + std::ptrdiff_t(row * kBuckets), kBuckets, 0);
    correct.insert(correct.begin() + std::ptrdiff_t(row * kBuckets), kBuckets, 0);
  }
  const size_t k = at(row, passkey_depth_bucket(depth, kBuckets));
  ++total[k];
  correct[k] += retrieved;
}

int64_t EvalResult::bucket_start(int k) { return k == 0 ? 0 : int64_t(64) << (k - 1); }

int64_t EvalResult::keys_asked() const {
  int64_t n = 0;
  for (int64_t a : asked) n += a;
  return n;
}

int64_t EvalResult::keys_retrieved() const {
  int64_t n = 0;
  for (int64_t g : retrieved) n += g;
  return n;
}

EvalResult evaluate(LlamaModel& model, TokenSource& data, int64_t seq_len, int64_t B,
                    int64_t max_sequences, PhaseClock& clock, const EvalProgress& progress,
                    const EvalCp& cp) {
  const DatasetInfo& ds = data.info();
  const Packing packing = pack_documents(ds.doc_offsets, seq_len);
  int64_t n = int64_t(packing.sequences.size());
  if (max_sequences > 0) n = std::min(n, max_sequences);
  EvalResult r;
  std::vector<int32_t> argmax(size_t(B * seq_len));
  std::vector<float> token_loss(size_t(B * seq_len));
  for (int64_t s0 = 0; s0 < n; s0 += B) {
    std::vector<const PackedSequence*> seqs;
    for (int64_t s = s0; s < std::min(n, s0 + B); ++s) seqs.push_back(&packing.sequences[size_t(s)]);
    Batch b = make_batch(data, seqs, seq_len);
    b.weights.clear();
    r.loss_sum += forward(model, b, B, cp, clock, argmax.data(), token_loss.data());
    r.valid_targets += b.valid_targets();
    for (size_t t = 0; t < b.targets.size(); ++t) {
      if (b.targets[t] < 0) continue;
      r.correct += argmax[t] == b.targets[t];
      const size_t k = size_t(position_bucket(b.pos[t]));
      if (r.position_loss.size() <= k) {
        r.position_loss.resize(k + 1, 0.0);
        r.position_targets.resize(k + 1, 0);
      }
      r.position_loss[k] += token_loss[t];
      r.position_targets[k] += 1;
    }
    r.sequences += b.B;
    if (progress) progress(r.sequences, n);
    if (ds.passkey.empty()) continue;
    for (int64_t s = 0; s < b.B; ++s) {
      int64_t at = s * seq_len;  // stream position of the span's first token
      for (const Span& sp : seqs[size_t(s)]->spans) {
        const int64_t d = sp.doc;
        if (sp.start_in_doc != 0 || sp.length != ds.doc_length(d)) {
          r.split_docs += sp.start_in_doc == 0;
        } else {
          const int64_t a = at + ds.passkey.answer_offset[size_t(d)];
          const size_t n_answer = size_t(ds.passkey.answer_length[size_t(d)]);
          if (r.answer_tokens.size() < n_answer) {
            r.answer_tokens.resize(n_answer, 0);
            r.answer_right.resize(n_answer, 0);
          }
          bool ok = true;
          for (size_t k = 0; k < n_answer; ++k) {
            const bool right = argmax[size_t(a) + k - 1] == b.tokens[size_t(a) + k];
            ++r.answer_tokens[k];
            r.answer_right[k] += right;
            ok = ok && right;
          }
          const auto key = b.tokens.begin() + std::ptrdiff_t(a);
          const bool repeats = std::set<int32_t>(key, key + std::ptrdiff_t(n_answer)).size() < n_answer;
          r.repeat_asked += repeats;
          r.repeat_retrieved += repeats && ok;
          const double depth = ds.passkey.depth[size_t(d)];
          const int bucket = passkey_depth_bucket(depth, EvalResult::kBuckets);
          ++r.asked[bucket];
          r.retrieved[bucket] += ok;
          r.passkey.add(sp.length, depth, ok);
        }
        at += sp.length;
      }
    }
  }
  return r;
}

}  // namespace lct
