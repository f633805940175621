// The knobs (user settings) core's messages name, so that a message can say which one to
// turn. How a user sets one (a command-line flag, a config-file key, an environment
// variable) is the application's business: it installs its spelling at start-up
// (app/cli/knob_flags.cpp); until then a knob is spelled by its key, the name a config file
// gives it ("seq_len").
#pragma once
#include <string>

namespace lct {

enum class Knob {
  SeqLen, SeqLenSchedule, BatchSize, InitFrom, RunDir, KeepCheckpoints, Force,
  Tp, TpSequenceParallel, Cp, CpAlgo, UlyssesDegree, Zero, Precision,
  VocabSize, TokenizerModel, RopeFactor, RopeOriginalMaxPositionEmbeddings, RopeLowFreqFactor, RopeHighFreqFactor,
  Gemm, Isa, Threads, Oversubscribe, TimeLimit, CommTimeout, ToHf, FromHf,
};
inline constexpr Knob kAllKnobs[] = {
  Knob::SeqLen, Knob::SeqLenSchedule, Knob::BatchSize, Knob::InitFrom, Knob::RunDir,
  Knob::KeepCheckpoints, Knob::Force, Knob::Tp, Knob::TpSequenceParallel, Knob::Cp,
  Knob::CpAlgo, Knob::UlyssesDegree, Knob::Zero, Knob::Precision, Knob::VocabSize,
  Knob::TokenizerModel, Knob::RopeFactor, Knob::RopeOriginalMaxPositionEmbeddings,
  Knob::RopeLowFreqFactor, Knob::RopeHighFreqFactor, Knob::Gemm, Knob::Isa, Knob::Threads,
  Knob::Oversubscribe, Knob::TimeLimit, Knob::CommTimeout, Knob::ToHf, Knob::FromHf,
};

const char* knob_key(Knob k);  // "seq_len"
// How the user sets it: the installed spelling ("--seq-len" in lctrain), else the key.
std::string knob_name(Knob k);
void spell_knobs_with(std::string (*spelling)(Knob));

}  // namespace lct
