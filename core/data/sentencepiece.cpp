#include "data/sentencepiece.hpp"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <unordered_map>

#include "common/knobs.hpp"
#include "common/error.hpp"

namespace lct {

namespace {

// Protocol-buffer wire format, just enough to walk a message: each field is a varint key
// (number << 3 | wire type) then a varint, 8 bytes, a length-prefixed run, or 4 bytes.
struct Wire {
  std::string_view s;
  size_t at = 0;
  bool bad = false;
  bool done() const { return bad || at >= s.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at >= s.size()) break;
      const auto b = static_cast<unsigned char>(s[at++]);
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    bad = true;
    return 0;
  }
  // The next field: its number, wire type, varint value or length-delimited bytes.
  bool next(uint64_t& field, int& wire, uint64_t& value, std::string_view& bytes) {
    const uint64_t key = varint();
    field = key >> 3;
    wire = int(key & 7);
    if (bad || field == 0) return !(bad = true);
    const size_t fixed = wire == 1 ? 8 : wire == 5 ? 4 : 0;
    if (wire == 0) {
      value = varint();
    } else if (fixed) {
      if (s.size() - at < fixed) return !(bad = true);
      at += fixed;
    } else if (wire == 2) {
      const uint64_t n = varint();
      if (bad || n > s.size() - at) return !(bad = true);
      bytes = s.substr(at, size_t(n));
      at += size_t(n);
    } else {
      return !(bad = true);  // groups (3, 4) and unknown wire types: not a ModelProto
    }
    return !bad;
  }
};

// SentencePiece's reason without its source location ("Internal: ./src/x.cc(660) [check] reason").
std::string status_text(const sentencepiece::util::Status& st) {
  const std::string s = st.message();
  const size_t at = s.rfind("] ");
  return at == std::string::npos ? s : s.substr(at + 2);
}

}  // namespace

std::string sentencepiece_version() { return LCT_SPM_VERSION; }

SentencePieceSpec read_sentencepiece_spec(std::string_view model) {
  // ModelProto: 1 pieces (repeated), 2 trainer_spec; TrainerSpec: 3 model_type, 35 byte_fallback.
  SentencePieceSpec spec;
  Wire w{model};
  uint64_t field, value = 0;
  int wire;
  std::string_view bytes;
  bool pieces = false;
  while (!w.done() && w.next(field, wire, value, bytes)) {
    if (field == 1 && wire == 2) pieces = true;
    if (field != 2 || wire != 2) continue;
    Wire t{bytes};
    while (!t.done() && t.next(field, wire, value, bytes)) {
      if (field == 3 && wire == 0)
        spec.type = value == 1 ? "unigram" : value == 2 ? "bpe" : value == 3 ? "word" : value == 4 ? "char" : "unknown";
      if (field == 35 && wire == 0) spec.byte_fallback = value != 0;
    }
    if (t.bad) return spec;
  }
  spec.ok = !w.bad && pieces;
  return spec;
}

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model, const std::string& what,
                                               const std::string& fix)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  const SentencePieceSpec spec = read_sentencepiece_spec(model);
  if (!spec.ok)
    fail(what, " is not a SentencePiece model (", model.size(), " bytes that do not parse as its ",
         "ModelProto); ", fix);
  if (const auto st = sp_->LoadFromSerializedProto(model); !st.ok())
    fail(what, " is not a usable SentencePiece model: ", status_text(st), "; ", fix);
  if (sp_->bos_id() < 0 || sp_->eos_id() < 0)
    fail(what, ": the SentencePiece model has no ", sp_->bos_id() < 0 ? "BOS" : "EOS",
         " piece, which every document starts or ends with; train it with --bos_id and --eos_id set");
  info_.name = kName;
  info_.type = spec.type;
  info_.vocab_size = sp_->GetPieceSize();
  info_.bos_id = sp_->bos_id();
  info_.eos_id = sp_->eos_id();
  info_.pad_id = sp_->pad_id() >= 0 ? sp_->pad_id() : sp_->unk_id();
  info_.model = model;
  byte_fallback_ = spec.byte_fallback;
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int32_t> SentencePieceTokenizer::encode_document(std::string_view text) const {
  std::vector<int> ids;
  if (const auto st = sp_->Encode(text, &ids); !st.ok())
    fail("SentencePiece cannot encode a document: ", status_text(st));
  std::vector<int32_t> out;
  out.reserve(ids.size() + 2);
  out.push_back(info_.bos_id);
  out.insert(out.end(), ids.begin(), ids.end());
  out.push_back(info_.eos_id);
  return out;
}

// Runs of ordinary ids go to SentencePiece together (so byte-fallback pieces join into
// characters again); control and out-of-range ids are skipped or shown as markers.
std::string SentencePieceTokenizer::decode(const int32_t* ids, size_t n, bool show_special) const {
  std::string out, text;
  std::vector<int> run;
  auto flush = [&] {
    if (run.empty()) return;
    if (const auto st = sp_->Decode(run, &text); !st.ok())
      fail("SentencePiece cannot decode: ", status_text(st));
    out += text;
    run.clear();
  };
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    const bool inside = id >= 0 && id < info_.vocab_size;
    if (inside && !sp_->IsControl(id)) {
      run.push_back(id);
      continue;
    }
    flush();
    if (show_special)
      out += !inside ? "<unk>" : id == info_.bos_id ? "<bos>" : id == info_.eos_id ? "<eos>"
                                                  : id == info_.pad_id ? "<pad>" : "<" + sp_->IdToPiece(id) + ">";
  }
  flush();
  return out;
}

int32_t SentencePieceTokenizer::unk_id() const { return int32_t(sp_->unk_id()); }

std::string SentencePieceTokenizer::piece(int32_t id) const {
  return id >= 0 && id < info_.vocab_size ? sp_->IdToPiece(id) : "<unk>";
}

bool SentencePieceTokenizer::learned(int32_t id) const {
  return id >= 0 && id < info_.vocab_size && !sp_->IsUnknown(id) && !sp_->IsControl(id) && !sp_->IsByte(id);
}

namespace {

// Documents -> training sentences: one per line, long lines cut into pieces of at most
// kMaxBytes at character boundaries (SentencePiece skips longer sentences).
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  static constexpr size_t kMaxBytes = 4096;
  explicit LineIterator(const std::vector<std::string_view>& docs) : docs_(docs) { advance(); }
  bool done() const override { return doc_ >= docs_.size(); }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void advance() {
    for (; doc_ < docs_.size(); ++doc_, at_ = 0) {
      const std::string_view d = docs_[doc_];
      while (at_ < d.size()) {
        size_t end = d.find('\n', at_);
        if (end == std::string_view::npos) end = d.size();
        if (end - at_ > kMaxBytes) {  // back up to the start of a UTF-8 character
          end = at_ + kMaxBytes;
          while (end > at_ && (static_cast<unsigned char>(d[end]) & 0xC0) == 0x80) --end;
        }
        line_.assign(d.substr(at_, end - at_));
        at_ = end < d.size() && d[end] == '\n' ? end + 1 : end;
        if (!line_.empty()) return;
      }
    }
  }
  const std::vector<std::string_view>& docs_;
  size_t doc_ = 0, at_ = 0;
  std::string line_;
};

}  // namespace

std::string train_sentencepiece(const std::vector<std::string_view>& docs, const std::string& type,
                                int64_t vocab_size) {
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", type},
      {"vocab_size", std::to_string(vocab_size)},
      {"byte_fallback", "true"},
      {"unk_id", "0"}, {"bos_id", "1"}, {"eos_id", "2"}, {"pad_id", "3"},
      // Text in, the same text out: no NFKC, whitespace kept as it is.
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"split_digits", "true"},
      {"max_sentence_length", std::to_string(LineIterator::kMaxBytes)},
      // Reproducible: every sentence, in order, one thread.
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      {"num_threads", "1"},
      {"minloglevel", "2"},
  };
  LineIterator lines(docs);
  if (lines.done()) fail("prepare: the documents hold no text to train a tokenizer on");
  std::string model;
  const auto st = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
  // "Vocabulary size is smaller than required_chars. 261 vs 267. Increase ... --character_coverage":
  // an option prepare does not have; say what --vocab-size needs instead.
  const std::string why = st.ok() ? "" : status_text(st);
  if (const size_t at = why.find("required_chars. "); at != std::string::npos) {
    const std::string need = why.substr(why.find(" vs ", at) + 4, why.find('.', at + 16) - why.find(" vs ", at) - 4);
    fail("prepare: ", knob_name(Knob::VocabSize), " ", vocab_size, " cannot hold this text's ", type, " model: the 256 byte ",
         "pieces, unk, BOS, EOS, PAD and one piece per character of the text need ", need,
         "; raise ", knob_name(Knob::VocabSize), " above ", need);
  }
  if (!st.ok())
    fail("prepare: SentencePiece could not train a ", type, " tokenizer of ", knob_name(Knob::VocabSize), " ", vocab_size,
         " on this text: ", status_text(st));
  return model;
}

}  // namespace lct
