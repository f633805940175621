// What every subcommand receives: the parsed invocation, the MPI world, the topology built
// once at start-up, and where rank 0 prints.
#pragma once
#include <iosfwd>
#include <cstdint>
#include <string>
#include <vector>

#include "app/cli/cli.hpp"
#include "common/bf16.hpp"
#include "common/provenance.hpp"
#include "parallel/world.hpp"
#include "sys/topology.hpp"

namespace lct {

struct Context {
  const Invocation& inv;
  const World& world;
  Topology topo;

  std::ostream& out() const;            // std::cout on rank 0, a null stream elsewhere
  Provenance provenance() const;        // for every file written now
  void print_startup(const std::string& title, bool with_topology) const;
  // Measures the peak on every rank at once (topo.peak) and prints it: train and bench.
  // `again` (a probe after the first, e.g. kProbesBeforeAndAfter) keeps each peak's higher
  // reading and names it on the line; other work on a shared host slows a probe, so it reads
  // low, never high.
  void measure_peak(const std::string& again = "");
  static constexpr const char* kProbesBeforeAndAfter = "the higher of the probes before and after";
  // The peak MFU of a run in `precision` is measured against, and how it was obtained
  // (`override` > 0: --peak-gflops). bf16 without bf16 hardware runs on the fp32 units.
  std::pair<double, std::string> mfu_peak(Precision precision, double override) const;
  // The kernel path attention runs in `precision` (bf16 products only where vdpbf16ps is
  // faster than fp32 FMA); prints one line when it widens bf16.
  Isa attention_isa(Precision precision) const;
  // For bf16 on a CPU (or --isa) without bf16 products: one warning line; else empty.
  std::string bf16_warning(Precision precision) const;
};

// "4096,16384" -> {4096, 16384}; throws naming `flag` on anything but positive integers.
std::vector<int64_t> parse_int_list(const std::string& s, const std::string& flag);

int cmd_init(Context& ctx);
int cmd_prepare(Context& ctx);
int cmd_inspect(Context& ctx);
int cmd_train(Context& ctx);
int cmd_eval(Context& ctx);
int cmd_bench(Context& ctx);
int cmd_convert(Context& ctx);
int cmd_plan(Context& ctx);

}  // namespace lct
