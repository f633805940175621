// Refuses, with one line, a CPU older than the one the build targets, before any code
// compiled for that target runs: a binary built for x86-64-v3 on a login node would
// otherwise die of an illegal instruction on an older compute node, with no word of why.
// This file alone is compiled for the plain x86-64 baseline (app/CMakeLists.txt).
#include <cstdio>
#include <cstdlib>

#ifndef LCT_TARGET_ARCH
#define LCT_TARGET_ARCH ""
#endif

namespace {

#if defined(__x86_64__)
// Constructor priority 101: before every other static initializer of the executable.
__attribute__((constructor(101))) void refuse_an_older_cpu() {
  __builtin_cpu_init();
  const char* arch = LCT_TARGET_ARCH;
  const bool v4_build = __builtin_strcmp(arch, "x86-64-v4") == 0;
  if (!v4_build && __builtin_strcmp(arch, "x86-64-v3") != 0) return;  // native, v2, ...: nothing to check
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("bmi2");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (v4_build ? v4 : v3) return;
  std::fprintf(stderr,
               "lctrain: error: this CPU lacks %s, which this build (-march=%s) needs; build "
               "lctrain for it with cmake -DLCT_ARCH=x86-64-v%d, or with -DLCT_NATIVE=ON on a node "
               "of this kind\n",
               v4_build ? "AVX-512 (F, BW, VL, DQ)" : "AVX2/FMA/BMI2", arch, v4_build ? 3 : 2);
  std::_Exit(1);
}
#endif

}  // namespace
