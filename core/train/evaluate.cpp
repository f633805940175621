#include "train/evaluate.hpp"

#include <algorithm>

namespace lct {

EvalResult evaluate(LlamaModel& model, const TokenDataset& ds, int64_t seq_len, int64_t B,
                    int64_t max_sequences, PhaseClock& clock, const EvalProgress& progress) {
  const Packing packing = pack_documents(ds.doc_offsets, seq_len);
  int64_t n = int64_t(packing.sequences.size());
  if (max_sequences > 0) n = std::min(n, max_sequences);
  EvalResult r;
  std::vector<int32_t> argmax(size_t(B * seq_len));
  for (int64_t s0 = 0; s0 < n; s0 += B) {
    std::vector<const PackedSequence*> seqs;
    for (int64_t s = s0; s < std::min(n, s0 + B); ++s) seqs.push_back(&packing.sequences[size_t(s)]);
    const Batch b = make_batch(ds, seqs, seq_len);
    r.loss_sum += model.forward(b, clock, argmax.data());
    r.valid_targets += b.valid_targets();
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
