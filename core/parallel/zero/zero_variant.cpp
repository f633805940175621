#include "parallel/zero/zero_variant.hpp"

#include <iterator>
#include <string>

#include "common/bf16.hpp"
#include "common/error.hpp"

namespace lct {

// The variants, one file each in this folder.
extern const ZeroVariant kReplicated, kShardedMoments, kShardedGradients, kFullySharded;
namespace {
const ZeroVariant* const kVariants[] = {&kReplicated, &kShardedMoments, &kShardedGradients, &kFullySharded};
}  // namespace

const ZeroVariant& zero_variant(int64_t stage, int64_t ranks) {
  if (ranks < 2) return kReplicated;
  for (const ZeroVariant* v : kVariants)
    if (v->stage == stage) return *v;
  fail("ZeRO stage ", stage, ": there are stages 0 to ", std::size(kVariants) - 1);
}

std::vector<int64_t> zero_stages() {
  std::vector<int64_t> stages;
  for (const ZeroVariant* v : kVariants) stages.push_back(v->stage);
  return stages;
}

double zero_part(const ZeroShape& s) { return double(s.ranks - 1) / double(s.ranks) * double(s.layout.total); }
double wire_elem(const ZeroShape& s) { return s.wire == Precision::Bf16 ? double(sizeof(bf16)) : double(sizeof(float)); }

}  // namespace lct
