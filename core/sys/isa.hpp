// The kernel paths, narrowest first; each one runs on every CPU that runs a wider one. A
// header of its own (no standard library) because the ISA translation units include it.
//   generic      portable C++: any CPU, any head dimension
//   avx2         AVX2 + FMA, 8 floats per register (Haswell, Zen 1-3)
//   avx512       AVX-512 F/BW/VL/DQ, 16 floats per register (Skylake-X and later, Zen 4/5)
//   avx512_bf16  avx512 plus the bf16 dot product vdpbf16ps (Cooper Lake, Sapphire Rapids, Zen 4/5)
#pragma once

namespace lct {
enum class Isa : int { Generic = 0, Avx2 = 1, Avx512 = 2, Avx512Bf16 = 3 };
inline constexpr Isa kIsas[] = {Isa::Generic, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16};
}  // namespace lct
