#include "train/evaluate.hpp"

#include <algorithm>
#include <cstring>
#include <set>

#include "common/error.hpp"
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

namespace {
// The row of `length` in t, inserted (zero counts) where the ascending order puts it.
size_t row_of(PasskeyTable& t, int64_t length) {
  const auto it = std::lower_bound(t.lengths.begin(), t.lengths.end(), length);
  const size_t row = size_t(it - t.lengths.begin());
  if (it == t.lengths.end() || *it != length) {
    t.lengths.insert(it, length);
    t.total.insert(t.total.begin() + std::ptrdiff_t(row * PasskeyTable::kBuckets), PasskeyTable::kBuckets, 0);
    t.correct.insert(t.correct.begin() + std::ptrdiff_t(row * PasskeyTable::kBuckets), PasskeyTable::kBuckets, 0);
  }
  return row;
}

// a[i] += b[i], a grown to b's length first.
template <class T>
void add_into(std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() < b.size()) a.resize(b.size(), T(0));
  for (size_t i = 0; i < b.size(); ++i) a[i] += b[i];
}
}  // namespace

void PasskeyTable::add(int64_t length, double depth, bool retrieved) {
  const size_t k = at(row_of(*this, length), passkey_depth_bucket(depth, kBuckets));
  ++total[k];
  correct[k] += retrieved;
}

void PasskeyTable::merge(const PasskeyTable& other) {
  for (size_t i = 0; i < other.lengths.size(); ++i) {
    const size_t row = row_of(*this, other.lengths[i]);
    for (int k = 0; k < kBuckets; ++k) {
      total[at(row, k)] += other.total[at(i, k)];
      correct[at(row, k)] += other.correct[at(i, k)];
    }
  }
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

void EvalResult::merge(const EvalResult& o) {
  loss_sum += o.loss_sum;
  valid_targets += o.valid_targets;
  correct += o.correct;
  add_into(position_loss, o.position_loss);
  add_into(position_targets, o.position_targets);
  sequences += o.sequences;
  for (int k = 0; k < kBuckets; ++k) {
    asked[k] += o.asked[k];
    retrieved[k] += o.retrieved[k];
  }
  split_docs += o.split_docs;
  passkey.merge(o.passkey);
  add_into(answer_tokens, o.answer_tokens);
  add_into(answer_right, o.answer_right);
  repeat_asked += o.repeat_asked;
  repeat_retrieved += o.repeat_retrieved;
}

namespace {
// The numbers of EvalResult::to_numbers, written and read in one order: the scalars, then
// each vector as its length and its elements.
struct Numbers {
  std::vector<double> v;
  size_t at = 0;
  template <class T>
  void put(T x) { v.push_back(double(x)); }
  template <class T>
  void put(const std::vector<T>& x) {
    put(x.size());
    for (T e : x) put(e);
  }
  template <class T>
  void get(T& x) {
    if (at >= v.size()) fail("an evaluation's numbers end too early (ranks of different lctrain builds?)");
    x = T(v[at++]);
  }
  template <class T>
  void get(std::vector<T>& x) {
    size_t n = 0;
    get(n);
    x.resize(n);
    for (T& e : x) get(e);
  }
};

// One list of the fields for both directions.
template <class R, class Io>
void each_field(R& r, Io& io) {
  io(r.loss_sum), io(r.valid_targets), io(r.correct), io(r.position_loss), io(r.position_targets);
  io(r.sequences), io(r.split_docs), io(r.answer_tokens), io(r.answer_right);
  io(r.repeat_asked), io(r.repeat_retrieved);
  for (int k = 0; k < EvalResult::kBuckets; ++k) io(r.asked[k]), io(r.retrieved[k]);
  io(r.passkey.lengths), io(r.passkey.total), io(r.passkey.correct);
}
}  // namespace

std::vector<double> EvalResult::to_numbers() const {
  Numbers n;
  auto put = [&n](const auto& x) { n.put(x); };
  each_field(*this, put);
  return n.v;
}

EvalResult EvalResult::from_numbers(const std::vector<double>& v) {
  Numbers n{v, 0};
  EvalResult r;
  auto get = [&n](auto& x) { n.get(x); };
  each_field(r, get);
  return r;
}

EvalResult evaluate(LlamaModel& model, TokenSource& data, int64_t seq_len, int64_t B,
                    int64_t max_sequences, PhaseClock& clock, const EvalProgress& progress,
                    const EvalCp& cp, const EvalShare& share) {
  const DatasetInfo& ds = data.info();
  const Packing packing = pack_documents(ds.doc_offsets, seq_len);
  int64_t n = int64_t(packing.sequences.size());
  if (max_sequences > 0) n = std::min(n, max_sequences);
  EvalResult r;
  std::vector<int32_t> argmax(size_t(B * seq_len));
  std::vector<float> token_loss(size_t(B * seq_len));
  const int64_t batches = (n + B - 1) / B, rounds = (batches + share.parts - 1) / share.parts;
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t mine = (round * share.parts + share.part) * B;
    const bool spare = mine >= n;  // a spare replica in the last round: the first batch again, uncounted
    const int64_t s0 = spare ? 0 : mine;
    std::vector<const PackedSequence*> seqs;
    for (int64_t s = s0; s < std::min(n, s0 + B); ++s) seqs.push_back(&packing.sequences[size_t(s)]);
    Batch b = make_batch(data, seqs, seq_len);
    b.weights.clear();
    const double loss = forward(model, b, B, cp, clock, argmax.data(), token_loss.data());
    if (spare) continue;
    r.loss_sum += loss;
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
    if (progress) progress(std::min(n, (round + 1) * share.parts * B), n);
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
