// The unit and MPI tests read core's messages as lctrain prints them: with its flags
// (app/cli/knob_flags.cpp, installed by lctrain's parser at start-up).
#include "app/cli/knob_flags.hpp"

namespace {
const bool spelled = (lct::spell_knobs_with(lct::knob_flag), true);
}  // namespace
