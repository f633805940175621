#include "common/fault.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/error.hpp"

namespace lct {

void FaultPlan::fire(int my_rank, int64_t now) const {
  if (!due(my_rank, now)) return;
  switch (kind) {
    case FaultKind::Throw: throw std::runtime_error("injected fault (LCT_INJECT_FAULT)");
    case FaultKind::Exit: std::_Exit(3);
    case FaultKind::Hang:
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    case FaultKind::StallRing: fault_detail::stall_ring.store(true); break;
    case FaultKind::SlowRing: fault_detail::slow_ring_ms.store(kSlowRingMs); break;
    case FaultKind::Nan:
    case FaultKind::HangInFinalize:
    case FaultKind::LowPeak:
    case FaultKind::Steal:
    case FaultKind::SlowThread:
    case FaultKind::None: break;
  }
}

FaultPlan fault_from_environment() {
  FaultPlan f;
  const char* v = std::getenv("LCT_INJECT_FAULT");
  if (!v) return f;
  struct Name {
    const char* name;
    FaultKind kind;
  };
  static const Name names[] = {{"throw", FaultKind::Throw},         {"hang", FaultKind::Hang},
                               {"exit", FaultKind::Exit},           {"stallring", FaultKind::StallRing},
                               {"slowring", FaultKind::SlowRing},   {"nan", FaultKind::Nan},
                               {"finalize", FaultKind::HangInFinalize}, {"lowpeak", FaultKind::LowPeak},
                               {"steal", FaultKind::Steal},         {"slowthread", FaultKind::SlowThread}};
  char kind[16] = "";
  long long step = -1;
  const std::string k = std::sscanf(v, "%15[a-z]:%d:%lld", kind, &f.rank, &step) == 3 ? kind : "";
  for (const Name& n : names)
    if (k == n.name) f.kind = n.kind;
  if (f.kind == FaultKind::None)
    fail("LCT_INJECT_FAULT='", v, "' must be KIND:RANK:STEP with KIND throw, hang, exit, stallring, slowring, nan, finalize, lowpeak, steal or slowthread");
  f.step = step;
  return f;
}

}  // namespace lct
