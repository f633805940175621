// Which kernel paths the tests run: every path this CPU executes (widest first), so that an
// AVX-512 machine also tests the avx2 and generic paths; or only the one LCT_ISA names.
#pragma once
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/isa/kernels.hpp"
#include "sys/cpu.hpp"

namespace lct {

inline const CpuInfo& test_cpu() {
  static const CpuInfo cpu = detect_cpu();
  return cpu;
}

// Distinct kernel paths (a path whose tiles are a wider one's is not repeated); empty when
// LCT_ISA names a path this CPU cannot run (the tests then skip).
inline std::vector<Isa> test_isas() {
  const char* env = std::getenv("LCT_ISA");
  if (env && *env && std::string(env) != "auto") {
    const Isa isa = parse_isa(env);
    if (test_cpu().runs(isa) && isa_kernels(isa)) return {isa};
    return {};
  }
  std::vector<Isa> out;
  for (Isa i : kIsas) {
    const IsaKernels* k = isa_kernels(i);
    if (!k || !test_cpu().runs(i)) continue;
    if (!out.empty() && isa_kernels(out.front())->flash_fwd_tile == k->flash_fwd_tile) out.erase(out.begin());
    out.insert(out.begin(), i);
  }
  return out;
}

// The path of whole-model tests: LCT_ISA's, or the widest.
inline Isa test_isa() {
  const std::vector<Isa> all = test_isas();
  return all.empty() ? Isa::Generic : all.front();
}

}  // namespace lct
