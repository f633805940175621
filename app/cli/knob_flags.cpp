#include "app/cli/knob_flags.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace lct {

std::string knob_flag(Knob k) {
  std::string flag = std::string("--") + knob_key(k);
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

void spell_knobs_as_flags(const std::set<std::string>& declared) {
  for (Knob k : kAllKnobs)
    if (!declared.count(knob_key(k)))
      fail("internal: core's messages name the setting '", knob_key(k), "', which no option declares ",
           "(common/knobs.hpp and app/cli/cli_options.cpp disagree)");
  spell_knobs_with(knob_flag);
}

}  // namespace lct
