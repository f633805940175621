#include "sys/cpu.hpp"

#include <unistd.h>

#include <fstream>
#include <set>
#include <utility>

#include "common/error.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#endif

namespace lct {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Generic: return "generic";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Avx512Bf16: return "avx512_bf16";
  }
  return "?";
}

Isa parse_isa(const std::string& name) {
  for (Isa i : kIsas)
    if (name == isa_name(i)) return i;
  fail("unknown kernel path '", name, "': use auto, avx512_bf16, avx512, avx2 or generic");
}

Isa CpuInfo::widest() const {
  if (avx512 && avx512_bf16) return Isa::Avx512Bf16;
  if (avx512) return Isa::Avx512;
  if (avx2 && fma) return Isa::Avx2;
  return Isa::Generic;
}

std::string CpuInfo::features() const {
  std::string s;
  auto add = [&](bool have, const char* name) {
    if (!have) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(avx2, "AVX2");
  add(fma, "FMA");
  add(avx512, "AVX-512");
  add(avx512_bf16, "AVX512_BF16");
  add(amx_bf16, "AMX-BF16");
  if (!amx_bf16) s += s.empty() ? "no AMX" : " (no AMX)";
  return s.empty() ? "no SIMD extension lctrain uses" : s;
}

namespace {

std::string read_first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

#if defined(__x86_64__)
struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};
Regs cpuid(unsigned leaf, unsigned sub = 0) {
  Regs r;
  __cpuid_count(leaf, sub, r.a, r.b, r.c, r.d);
  return r;
}
unsigned long long xgetbv0() {
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}
bool bit(unsigned v, int b) { return (v >> b) & 1u; }

// Linux hands out AMX tile data only on request (arch_prctl ARCH_REQ_XCOMP_PERM); oneDNN
// makes the same request before it runs AMX kernels.
bool amx_tiles_granted() {
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}
#endif

}  // namespace

std::vector<int> parse_cpu_list(const std::string& list) {
  std::vector<int> cpus;
  size_t i = 0;
  while (i < list.size()) {
    size_t end = list.find(',', i);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(i, end - i);
    const size_t dash = item.find('-');
    try {
      const int a = std::stoi(item.substr(0, dash));
      const int b = dash == std::string::npos ? a : std::stoi(item.substr(dash + 1));
      for (int c = a; c <= b; ++c) cpus.push_back(c);
    } catch (const std::exception&) {
      return {};
    }
    i = end + 1;
  }
  return cpus;
}

int physical_cores_of(const std::vector<int>& cpus) {
  std::set<std::pair<std::string, std::string>> cores;
  int unknown = 0;
  for (int c : cpus) {
    const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    const std::string pkg = read_first_line(base + "physical_package_id");
    const std::string core = read_first_line(base + "core_id");
    if (pkg.empty() || core.empty()) ++unknown;
    else cores.insert({pkg, core});
  }
  return int(cores.size()) + unknown;
}

CpuInfo detect_cpu() {
  CpuInfo ci;
  ci.logical_cpus = int(sysconf(_SC_NPROCESSORS_ONLN));
  std::vector<int> online = parse_cpu_list(read_first_line("/sys/devices/system/cpu/online"));
  if (online.empty())
    for (int c = 0; c < ci.logical_cpus; ++c) online.push_back(c);
  ci.physical_cores = physical_cores_of(online);
#if defined(__x86_64__)
  const Regs v = cpuid(0);
  char vendor[13] = {0};
  for (int i = 0; i < 4; ++i) {
    vendor[i] = char(v.b >> (8 * i));
    vendor[4 + i] = char(v.d >> (8 * i));
    vendor[8 + i] = char(v.c >> (8 * i));
  }
  ci.vendor = vendor;
  const Regs f1 = cpuid(1);
  const unsigned base_family = (f1.a >> 8) & 0xf, base_model = (f1.a >> 4) & 0xf;
  ci.family = int(base_family == 0xf ? base_family + ((f1.a >> 20) & 0xff) : base_family);
  ci.model = int((base_family == 0x6 || base_family == 0xf) ? (((f1.a >> 16) & 0xf) << 4) | base_model
                                                           : base_model);
  if (cpuid(0x80000000).a >= 0x80000004) {
    char brand[49] = {0};
    for (unsigned i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002 + i);
      const unsigned w[4] = {r.a, r.b, r.c, r.d};
      for (int j = 0; j < 16; ++j) brand[16 * i + j] = char(w[j / 4] >> (8 * (j % 4)));
    }
    ci.model_name = brand;
    while (!ci.model_name.empty() && ci.model_name.back() == ' ') ci.model_name.pop_back();
    ci.model_name.erase(0, ci.model_name.find_first_not_of(' '));
  }
  const bool osxsave = bit(f1.c, 27);
  const unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;             // xmm, ymm
  const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask, zmm hi256, hi16 zmm
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;     // tile config, tile data
  const Regs f7 = v.a >= 7 ? cpuid(7, 0) : Regs{};
  const Regs f71 = v.a >= 7 ? cpuid(7, 1) : Regs{};
  ci.fma = os_avx && bit(f1.c, 12);
  ci.avx2 = os_avx && bit(f7.b, 5);
  ci.avx512 = os_avx512 && bit(f7.b, 16) && bit(f7.b, 30) && bit(f7.b, 31) && bit(f7.b, 17);
  ci.avx512_bf16 = ci.avx512 && bit(f71.a, 5);
  ci.amx_bf16 = os_amx && bit(f7.d, 22) && bit(f7.d, 24) && amx_tiles_granted();
#else
  ci.model_name = read_first_line("/proc/device-tree/model");
#endif
  if (ci.model_name.empty()) ci.model_name = "unknown CPU";
  return ci;
}

}  // namespace lct
