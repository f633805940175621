// RoPE scalings as the tests build them: a type and its factor (and original length), every
// other parameter at its default; llama3's with its two frequency factors.
#pragma once
#include <cstdint>

#include "model/config.hpp"

namespace lct {

inline RopeScaling rope_scaling(const char* type, double factor, int64_t original = 0) {
  RopeScaling r;
  r.rope_type = type;
  r.factor = factor;
  r.original_max_position_embeddings = original;
  return r;
}

inline RopeScaling llama3_scaling(double factor, int64_t original, double low, double high) {
  RopeScaling r = rope_scaling("llama3", factor, original);
  r.low_freq_factor = low;
  r.high_freq_factor = high;
  return r;
}

}  // namespace lct
