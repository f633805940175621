#include "app/cli/context.hpp"

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <iomanip>
#include <iostream>

#include "app/cli/progress.hpp"
#include "common/error.hpp"
#include "kernels/gemm.hpp"
#include "lct_build_info.hpp"

namespace lct {

namespace {
struct NullBuffer : std::streambuf {
  int overflow(int c) override { return c; }
};
}  // namespace

std::ostream& Context::out() const {
  static NullBuffer null_buffer;
  static std::ostream null_stream(&null_buffer);
  return world.root() ? std::cout : null_stream;
}

Provenance Context::provenance() const {
  Provenance p;
  p.version = LCT_VERSION;
  p.git_revision = LCT_GIT_REVISION;
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  p.date = date;
  p.host = topo.host;
  p.command_line = inv.command_line;
  p.config = inv.settings;
  return p;
}

void Context::print_startup(const std::string& title, bool with_topology) const {
  std::ostream& o = out();
  o << timestamp() << "lctrain " << LCT_VERSION << " (git " << LCT_GIT_REVISION << ") " << title << "\n";
  // What differs from the defaults; every option, resolved, is in the provenance of each
  // file the run writes (and `lctrain inspect` shows it).
  int64_t defaults = 0;
  for (const Setting& s : inv.settings) {
    if (s.is_default) {
      ++defaults;
      continue;
    }
    o << "  " << std::left << std::setw(26) << (s.section.empty() ? s.key : s.section + "." + s.key)
      << " " << std::setw(18) << to_string(s.value) << "\n";
  }
  o << "  (" << defaults << " other option" << (defaults == 1 ? "" : "s")
    << " at the default; all are in the provenance of every file written)\n";
  if (with_topology) {
    o << "topology (rank 0; " << world.size << " rank" << (world.size == 1 ? "" : "s") << " in all)\n";
    std::string text = topo.describe();
    for (size_t start = 0; start < text.size();) {
      const size_t end = text.find('\n', start);
      o << "  " << text.substr(start, end - start) << "\n";
      start = end == std::string::npos ? text.size() : end + 1;
    }
    o << "  gemm: " << gemm_description() << "; OpenBLAS " << openblas_kernels() << " kernels ("
      << (gemm_lib() == GemmLib::OpenBlas ? "in use" : gemm_weight_grads_lib() == GemmLib::OpenBlas ? "weight gradients" : "fallback")
      << ")\n";
    const std::string warning = openblas_kernel_warning(topo.cpu);
    if (!warning.empty()) o << warning << "\n";
  }
  o << std::flush;
}

namespace {

// A thread whose best probe window ran below this share of the median thread's is named at
// start-up. On a 2-core VM the two threads read 77-100% of each other's best while a compiler
// ran beside them on and off, 53-57% while it held one of the CPUs; the test hook reads a
// fifth. Threads are compared inside a rank: ranks of one thread each are not.
constexpr double kUnevenThreadRate = 0.67;

std::string uneven_thread_note(const Peak& p) {
  return cat("note: thread ", p.slowest_thread, " of rank ", p.slowest_rank,
             p.slowest_cpu >= 0 ? cat(" (pinned to CPU ", p.slowest_cpu, ")") : std::string(),
             " ran the peak probe at ", int(100 * p.slowest_thread_rate + 0.5),
             "% of the median thread's rate in its best window: other work shares its CPU (another ",
             "process, interrupts, or a hypervisor's other guests), and every parallel region waits ",
             "for it. Free that CPU, leave it out of the rank's CPU set (srun --cpu-bind, taskset), ",
             "run fewer --threads, or pass --no-bind-threads so that the OS may move the thread");
}

}  // namespace

void Context::measure_peak(const std::string& again) {
  const bool keep_higher = !again.empty();
  Peak p = measure_peak_together(world, topo, !keep_higher);
  if (keep_higher) {
    p.fp32 = std::max(p.fp32, topo.peak.fp32);
    p.bf16 = std::max(p.bf16, topo.peak.bf16);
    p.bf16_amx_nominal = std::max(p.bf16_amx_nominal, topo.peak.bf16_amx_nominal);
  }
  topo.peak = p;
  std::ostream& o = out();
  o << std::fixed << std::setprecision(1)
    << (keep_higher ? "peak, " + again + ": fp32 " : "peak: fp32 ") << p.fp32
    << " GFLOP/s per rank (" << p.fp32_how << ")";
  if (p.bf16 > 0) o << ", bf16 " << p.bf16 << " (" << p.bf16_how << ")";
  if (p.bf16_amx_nominal > 0) o << ", AMX bf16 nominal " << p.bf16_amx_nominal;
  o << std::defaultfloat << std::setprecision(6) << "\n";
  if (!keep_higher && p.slowest_thread_rate < kUnevenThreadRate) o << uneven_thread_note(p) << "\n";
  o << std::flush;
}

std::pair<double, std::string> Context::mfu_peak(Precision precision, double override) const {
  const Peak& p = topo.peak;
  if (override > 0) return {override, "--peak-gflops"};
  if (precision == Precision::Bf16 && gemm_bf16_native()) {
    if (p.bf16_amx_nominal > p.bf16)
      return {p.bf16_amx_nominal, "bf16, AMX nominal (1024 FLOP per cycle per core at the measured clock)"};
    return {p.bf16, "bf16, " + p.bf16_how};
  }
  return {p.fp32, (precision == Precision::Bf16 ? "fp32 units (no bf16 products here), " : "fp32, ") + p.fp32_how};
}

Isa Context::attention_isa(Precision precision) const {
  const Isa isa = lct::attention_isa(topo.isa, precision, topo.cpu);
  if (isa != topo.isa)
    out() << "attention: bf16 operands widened to fp32 products (this CPU's AVX512_BF16 cores "
          << "run vdpbf16ps at half the fp32 FMA rate); matrix products stay bf16\n";
  return isa;
}

std::string Context::bf16_warning(Precision precision) const {
  if (precision != Precision::Bf16 || gemm_bf16_native()) return "";
  return cat("warning: --precision bf16 without bf16 products here (",
             topo.cpu.avx512_bf16 ? "--isa " + std::string(isa_name(topo.isa)) + " or --gemm openblas"
                                  : "this CPU has no AVX512_BF16 or AMX",
             "): bf16 halves activation memory and communication but products are computed in ",
             "fp32, so it is not faster");
}

std::vector<int64_t> parse_int_list(const std::string& s, const std::string& flag) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(',', start), s.size());
    const std::string item = s.substr(start, end - start);
    char* stop = nullptr;
    const long long v = std::strtoll(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0' || v < 1)
      fail(flag, " '", s, "': '", item, "' is not a positive integer; give a comma-separated list");
    out.push_back(v);
    start = end + 1;
  }
  return out;
}

}  // namespace lct
