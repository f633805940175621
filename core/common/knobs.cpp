#include "common/knobs.hpp"

namespace lct {

namespace {
std::string (*g_spelling)(Knob) = nullptr;
}  // namespace

const char* knob_key(Knob k) {
  switch (k) {
    case Knob::SeqLen: return "seq_len";
    case Knob::SeqLenSchedule: return "seq_len_schedule";
    case Knob::BatchSize: return "batch_size";
    case Knob::InitFrom: return "init_from";
    case Knob::RunDir: return "run_dir";
    case Knob::KeepCheckpoints: return "keep_checkpoints";
    case Knob::Force: return "force";
    case Knob::Tp: return "tp";
    case Knob::TpSequenceParallel: return "tp_sequence_parallel";
    case Knob::Cp: return "cp";
    case Knob::CpAlgo: return "cp_algo";
    case Knob::UlyssesDegree: return "ulysses_degree";
    case Knob::Zero: return "zero";
    case Knob::Precision: return "precision";
    case Knob::VocabSize: return "vocab_size";
    case Knob::TokenizerModel: return "tokenizer_model";
    case Knob::RopeFactor: return "rope_factor";
    case Knob::RopeOriginalMaxPositionEmbeddings: return "rope_original_max_position_embeddings";
    case Knob::RopeLowFreqFactor: return "rope_low_freq_factor";
    case Knob::RopeHighFreqFactor: return "rope_high_freq_factor";
    case Knob::Gemm: return "gemm";
    case Knob::Isa: return "isa";
    case Knob::Threads: return "threads";
    case Knob::Oversubscribe: return "oversubscribe";
    case Knob::TimeLimit: return "time_limit";
    case Knob::CommTimeout: return "comm_timeout";
    case Knob::ToHf: return "to_hf";
    case Knob::FromHf: return "from_hf";
  }
  return "?";
}

std::string knob_name(Knob k) { return g_spelling ? g_spelling(k) : std::string(knob_key(k)); }

void spell_knobs_with(std::string (*spelling)(Knob)) { g_spelling = spelling; }

}  // namespace lct
