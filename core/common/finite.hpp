// Counting the values of a buffer that are not finite, and saying how many in words: model
// files and checkpoints are refused on load with it, and weights before they are written.
#pragma once
#include <cmath>
#include <cstddef>
#include <string>

#include "common/error.hpp"

namespace lct {

struct NonFinite {
  size_t nan = 0, inf = 0;
  size_t total() const { return nan + inf; }
};

inline NonFinite count_non_finite(const float* x, size_t n) {
  NonFinite c;
  for (size_t i = 0; i < n; ++i) {
    c.nan += std::isnan(x[i]);
    c.inf += std::isinf(x[i]);
  }
  return c;
}

// "2 NaN values", "1 NaN and 3 infinite values"
inline std::string describe(const NonFinite& c) {
  if (c.nan && c.inf) return cat(c.nan, " NaN and ", c.inf, " infinite values");
  const size_t n = c.nan ? c.nan : c.inf;
  return cat(n, c.nan ? " NaN value" : " infinite value", n > 1 ? "s" : "");
}

}  // namespace lct
