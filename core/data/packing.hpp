// Packing documents into fixed-length sequences. The rule (also in docs/files.md, "Packing"):
//   Documents are taken in file order. A document that fits in what is left of the open
//   sequence goes there; otherwise that sequence is closed (its tail is padding) and a new
//   one opens (next-fit). A document longer than the sequence is cut into pieces of seq_len
//   tokens, each treated as a document of its own (it cannot see the piece before it): its
//   whole pieces are sequences of their own and leave the open sequence open; its last,
//   shorter piece is packed like a document.
// Sequences are ordered by their first token, so `eval` sees documents in file order.
// Before rule 2 a long document's whole pieces closed the open sequence: a corpus of
// documents a little longer than the sequence packed at about 55% instead of 99%.
#pragma once
#include <cstdint>
#include <vector>

#include "data/dataset.hpp"

namespace lct {

// Recorded in checkpoints: a resume under another rule continues another order.
constexpr int64_t kPackingRule = 2;

struct Span {
  int64_t doc;     // document index in the dataset
  int64_t begin;   // first token, index into TokenDataset::tokens
  int64_t length;  // tokens
  int64_t start_in_doc;  // offset of `begin` from the document's start (non-zero for pieces)
};

struct PackedSequence {
  std::vector<Span> spans;  // in order; the rest of the sequence is padding
  int64_t used = 0;         // real tokens
};

struct Packing {
  int64_t seq_len = 0;
  std::vector<PackedSequence> sequences;
  int64_t real_tokens = 0;
  int64_t split_docs = 0;   // documents longer than seq_len, cut into pieces
  double efficiency() const;  // real tokens / (sequences x seq_len)
};

Packing pack_documents(const std::vector<int64_t>& doc_offsets, int64_t seq_len);

// One sequence as model input, each array [seq_len]:
//   tokens   input ids (PAD after the last span)
//   targets  the next token of the same document, or -1 where nothing is scored (the last
//            token of each span and padding)
//   doc_ids  0, 1, ... per span, -1 on padding: attention is causal within one doc id
//   pos      position inside the document (RoPE restarts at every document)
//   weights  (optional) the loss weight of each target (0 where nothing is scored); read only
//            from a source that has weights
// Reads each span's tokens (a range) from `data`, and nothing else.
void fill_sequence(TokenSource& data, const PackedSequence& seq, int64_t seq_len, int32_t* tokens,
                   int32_t* targets, int32_t* doc_ids, int32_t* pos, float* weights = nullptr);

}  // namespace lct
