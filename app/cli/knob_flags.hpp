// lctrain's spelling of the knobs core's messages name (common/knobs.hpp): the command-line
// flag, the knob's config key with dashes ("seq_len" -> "--seq-len").
#pragma once
#include <set>
#include <string>

#include "common/knobs.hpp"

namespace lct {

std::string knob_flag(Knob k);
// Installs knob_flag as the spelling, after checking that every knob is an option some
// subcommand declares (`declared`: the options' config keys): a flag renamed without its
// knob stops every run here, instead of messages naming a flag that does not exist.
void spell_knobs_as_flags(const std::set<std::string>& declared);

}  // namespace lct
