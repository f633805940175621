// The packed batch the model tests train on: four documents of 40, 25, 33 and 17 random ids
// below `max_id` (generator seeded with `seed`), laid back to back in one sequence of S.
#pragma once
#include <cstdint>
#include <random>

#include "data/dataset.hpp"
#include "model/batch.hpp"

namespace lct {

inline TokenDataset four_documents(int64_t vocab, uint32_t seed, uint32_t max_id) {
  TokenDataset ds;
  ds.vocab_size = vocab;
  ds.pad_id = 258;
  ds.doc_offsets = {0};
  std::mt19937 gen(seed);
  for (int len : {40, 25, 33, 17}) {
    for (int i = 0; i < len; ++i) ds.tokens.push_back(int32_t(gen() % max_id));
    ds.doc_offsets.push_back(int64_t(ds.tokens.size()));
  }
  return ds;
}

// All of ds's documents as one packed sequence of S tokens.
inline Batch one_sequence(const TokenDataset& ds, int64_t S) {
  const Packing p = pack_documents(ds.doc_offsets, S);
  return make_batch(ds, {&p.sequences[0]}, S);
}

}  // namespace lct
