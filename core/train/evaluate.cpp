#include "train/evaluate.hpp"

#include <algorithm>

namespace lct {

namespace {
// The model's forward pass over `b`, on this rank's shard when cp: the loss sum over every
// rank's tokens, and the argmax of every token of the whole batch in `argmax`.
double forward(LlamaModel& model, Batch b, int64_t B, const EvalCp& cp, PhaseClock& clock, int32_t* argmax) {
  if (cp.ranks == 1) return model.forward(b, clock, argmax);
  // The ring's blocks are B sequences' shards: a last, shorter batch is padded to B.
  for (int64_t t = b.B * b.S; t < B * b.S; ++t) {
    b.tokens.push_back(0);
    b.targets.push_back(-1);
    b.doc.push_back(-1);
    b.idx.push_back(int32_t(t));
    b.pos.push_back(0);
  }
  b.B = B;
  const Batch mine = shard_batch(b, cp.ranks, cp.rank, cp.split);
  std::vector<int32_t> local(mine.tokens.size());
  const double loss = cp.sum(model.forward(mine, clock, local.data()));
  const std::vector<int32_t> all = cp.allgather(local);  // rank after rank, Tl each
  for (int64_t r = 0; r < cp.ranks; ++r) {
    const std::vector<int64_t> rows = shard_indices(b.B, b.S, cp.ranks, r, cp.split);
    for (size_t i = 0; i < rows.size(); ++i) argmax[rows[i]] = all[size_t(r) * local.size() + i];
  }
  return loss;
}
}  // namespace

EvalResult evaluate(LlamaModel& model, const TokenDataset& ds, int64_t seq_len, int64_t B,
                    int64_t max_sequences, PhaseClock& clock, const EvalProgress& progress,
                    const EvalCp& cp) {
  const Packing packing = pack_documents(ds.doc_offsets, seq_len);
  int64_t n = int64_t(packing.sequences.size());
  if (max_sequences > 0) n = std::min(n, max_sequences);
  EvalResult r;
  std::vector<int32_t> argmax(size_t(B * seq_len));
  for (int64_t s0 = 0; s0 < n; s0 += B) {
    std::vector<const PackedSequence*> seqs;
    for (int64_t s = s0; s < std::min(n, s0 + B); ++s) seqs.push_back(&packing.sequences[size_t(s)]);
    const Batch b = make_batch(ds, seqs, seq_len);
    r.loss_sum += forward(model, b, B, cp, clock, argmax.data());
    r.valid_targets += b.valid_targets();
    for (size_t t = 0; t < b.targets.size(); ++t) r.correct += b.targets[t] >= 0 && argmax[t] == b.targets[t];
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
          bool ok = true;
          for (int64_t k = 0; k < ds.passkey.answer_length[size_t(d)]; ++k)
            ok = ok && argmax[size_t(a + k - 1)] == b.tokens[size_t(a + k)];
          const int bucket = std::min(EvalResult::kBuckets - 1,
                                      int(ds.passkey.depth[size_t(d)] * EvalResult::kBuckets));
          ++r.asked[bucket];
          r.retrieved[bucket] += ok;
        }
        at += sp.length;
      }
    }
  }
  return r;
}

}  // namespace lct
