#include "sys/peak.hpp"

namespace lct {

Isa attention_isa(Isa isa, Precision precision, const CpuInfo& cpu) {
  const bool slow_dot = cpu.vendor == "GenuineIntel";
  return precision == Precision::Bf16 && isa == Isa::Avx512Bf16 && slow_dot ? Isa::Avx512 : isa;
}

}  // namespace lct
