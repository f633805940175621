#include "kernels/isa/kernels.hpp"

namespace lct {

const IsaKernels* isa_kernels_generic();
#if defined(LCT_X86_KERNELS)
const IsaKernels* isa_kernels_avx2();
const IsaKernels* isa_kernels_avx512();
const IsaKernels* isa_kernels_avx512bf16();
#endif

const IsaKernels* isa_kernels(Isa isa) {
  switch (isa) {
    case Isa::Generic: return isa_kernels_generic();
#if defined(LCT_X86_KERNELS)
    case Isa::Avx2: return isa_kernels_avx2();
    case Isa::Avx512: return isa_kernels_avx512();
    case Isa::Avx512Bf16: return isa_kernels_avx512bf16();
#endif
    default: return nullptr;
  }
}

}  // namespace lct
