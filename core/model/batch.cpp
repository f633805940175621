#include "model/batch.hpp"

namespace lct {

int64_t Batch::valid_targets() const {
  int64_t n = 0;
  for (int32_t t : targets) n += t >= 0;
  return n;
}

double Batch::target_weight() const {
  if (weights.empty()) return double(valid_targets());
  double w = 0;
  for (size_t t = 0; t < targets.size(); ++t) w += targets[t] >= 0 ? double(weights[t]) : 0.0;
  return w;
}

int64_t Batch::real_tokens() const {
  int64_t n = 0;
  for (int32_t d : doc) n += d >= 0;
  return n;
}

Batch make_batch(const TokenDataset& ds, const std::vector<const PackedSequence*>& seqs, int64_t S) {
  MemorySource data(ds);
  return make_batch(data, seqs, S);
}

Batch make_batch(TokenSource& data, const std::vector<const PackedSequence*>& seqs, int64_t S) {
  Batch b;
  b.B = int64_t(seqs.size());
  b.S = S;
  const size_t T = size_t(b.B * S);
  b.tokens.resize(T);
  b.targets.resize(T);
  b.doc.resize(T);
  b.idx.resize(T);
  b.pos.resize(T);
  if (data.has_weights()) b.weights.resize(T);
  int32_t next_doc = 0;
  for (int64_t s = 0; s < b.B; ++s) {
    const size_t o = size_t(s * S);
    fill_sequence(data, *seqs[size_t(s)], S, &b.tokens[o], &b.targets[o], &b.doc[o], &b.pos[o],
                  b.weights.empty() ? nullptr : &b.weights[o]);
    int32_t docs = 0;
    for (size_t t = o; t < o + size_t(S); ++t)
      if (b.doc[t] >= 0) {
        docs = std::max(docs, b.doc[t] + 1);
        b.doc[t] += next_doc;
      }
    next_doc += docs;
  }
  for (size_t t = 0; t < T; ++t) b.idx[t] = int32_t(t);
  return b;
}

double visible_pairs(const Batch& b, int64_t window) {
  double pairs = 0;
  const size_t T = b.doc.size();
  for (size_t t = 0; t < T;) {
    size_t e = t;
    while (e < T && b.doc[e] == b.doc[t]) ++e;
    const double n = double(e - t), w = window > 0 ? std::min(double(window), n) : n;
    // the first w positions see 1..w keys, the n - w after them w each
    if (b.doc[t] >= 0) pairs += w * (w + 1) / 2.0 + (n - w) * w;
    t = e;
  }
  return pairs;
}

}  // namespace lct
