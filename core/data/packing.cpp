#include "data/packing.hpp"

#include <algorithm>
#include <cstdint>

#include "common/error.hpp"

namespace lct {

double Packing::efficiency() const {
  const double slots = double(sequences.size()) * double(seq_len);
  return slots > 0 ? double(real_tokens) / slots : 0.0;
}

Packing pack_documents(const std::vector<int64_t>& doc_offsets, int64_t seq_len) {
  if (seq_len < 2) fail("sequence length ", seq_len, " is too short: it must be at least 2");
  Packing p;
  p.seq_len = seq_len;
  size_t open = SIZE_MAX;  // the sequence still taking documents (its place kept in order)
  // `own`: a whole piece of a long document, a sequence by itself that leaves `open` open.
  auto place = [&](const Span& s, bool own) {
    size_t at = open;
    if (own || at == SIZE_MAX || p.sequences[at].used + s.length > seq_len) {
      at = p.sequences.size();
      p.sequences.emplace_back();
      if (!own) open = at;
    }
    PackedSequence& q = p.sequences[at];
    q.spans.push_back(s);
    q.used += s.length;
    p.real_tokens += s.length;
  };
  for (size_t d = 0; d + 1 < doc_offsets.size(); ++d) {
    const int64_t begin = doc_offsets[d], len = doc_offsets[d + 1] - begin;
    if (len == 0) continue;
    const bool split = len > seq_len;
    p.split_docs += split;
    for (int64_t start = 0; start < len; start += seq_len) {
      const int64_t piece = std::min(seq_len, len - start);
      place({int64_t(d), begin + start, piece, start}, split && piece == seq_len);
    }
  }
  return p;
}

void fill_sequence(TokenSource& data, const PackedSequence& seq, int64_t seq_len, int32_t* tokens,
                   int32_t* targets, int32_t* doc_ids, int32_t* pos, float* weights) {
  int64_t t = 0;
  for (size_t s = 0; s < seq.spans.size(); ++s) {
    const Span& sp = seq.spans[s];
    data.read_tokens(sp.begin, sp.length, tokens + t);
    // The target of position i is token i + 1, so its weight is that token's weight.
    if (weights) {
      data.read_weights(sp.begin + 1, sp.length - 1, weights + t);
      weights[t + sp.length - 1] = 0.0f;
    }
    for (int64_t i = 0; i < sp.length; ++i, ++t) {
      targets[t] = i + 1 < sp.length ? tokens[t + 1] : -1;
      doc_ids[t] = int32_t(s);
      pos[t] = int32_t(i);
    }
  }
  for (; t < seq_len; ++t) {
    tokens[t] = data.info().pad_id;
    targets[t] = -1;
    doc_ids[t] = -1;
    pos[t] = 0;
    if (weights) weights[t] = 0.0f;
  }
}

}  // namespace lct
