// lctrain prepare: text files or synthetic data (passkey, recall, copy) -> a dataset file,
// with the statistics that decide the sequence length (tokens per document, packing
// efficiency).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <optional>

#include <omp.h>

#include "app/cli/context.hpp"
#include "app/cli/progress.hpp"
#include "app/training/train_setup.hpp"
#include "common/error.hpp"
#include "data/copy.hpp"
#include "data/packing.hpp"
#include "data/passkey.hpp"
#include "data/recall.hpp"
#include "data/sentencepiece.hpp"
#include "data/text.hpp"
#include "data/text_stream.hpp"
#include "data/tokenizer.hpp"
#include "io/dataset_file.hpp"
#include "io/text_files.hpp"
#include "io/file_tokenizer.hpp"
#include "sys/memory.hpp"

namespace lct {

namespace {

// The whole dataset is built in memory before it is written: 4 bytes per token id (8 with
// --loss-on answers: the mask, as floats), plus one
// document's text and ids (about 10 bytes per token) while it is generated. Counted in
// double, so that sizes past 64 bits are refused too instead of overflowing.
void check_synthetic_fits_memory(const PrepareOptions& o, const std::vector<int64_t>& lengths) {
  double tokens = 0, longest = 0;  // the documents take the lengths in turn
  for (size_t i = 0; i < lengths.size(); ++i) {
    tokens += double(lengths[i]) * double((o.num_docs - int64_t(i) + int64_t(lengths.size()) - 1) /
                                          int64_t(lengths.size()));
    longest = std::max(longest, double(lengths[i]));
  }
  // ids, and the mask as floats (recall and copy make their masks in any case)
  const double per_token = o.loss_on == LossOn::Answers || o.synthetic != SyntheticData::Passkey ? 8.0 : 4.0;
  const double need = per_token * tokens + 10.0 * longest + 28.0 * double(o.num_docs);
  const double avail = available_memory().bytes;
  if (avail <= 0 || need <= 0.95 * avail) return;
  const char* length_flag = o.doc_lengths.empty() ? "--doc-length" : "--doc-lengths";
  fail("prepare: --num-docs ", o.num_docs, o.doc_lengths.empty() ? " x --doc-length " : " documents of --doc-lengths ",
       o.doc_lengths.empty() ? std::to_string(o.doc_length) : o.doc_lengths, " = ", tokens,
       " tokens need about ", gib(need), " of memory (the dataset is built whole before it is ",
       "written, ", per_token, " bytes per token) but ", gib(avail),
       " are available; use fewer documents (--num-docs) or shorter ones (", length_flag, ")");
}

// --doc-lengths powerlaw:MIN:MAX[:ALPHA]: one length per document, drawn from the power law.
std::vector<int64_t> drawn_lengths(const std::string& text, int64_t num_docs, uint64_t seed) {
  const auto bad = [&]() -> std::vector<int64_t> {
    fail("--doc-lengths '", text, "': give powerlaw:MIN:MAX or powerlaw:MIN:MAX:ALPHA with ",
         "1 <= MIN <= MAX tokens and ALPHA >= 0 (powerlaw:128:32768:1.5)");
  };
  long long lo = 0, hi = 0;
  double alpha = 1.5;
  int end = 0;
  const char* s = text.c_str() + std::strlen("powerlaw:");
  const int got = std::sscanf(s, "%lld:%lld%n", &lo, &hi, &end);
  if (got != 2) return bad();
  if (s[end] == ':') {
    int more = 0;
    if (std::sscanf(s + end + 1, "%lf%n", &alpha, &more) != 1) return bad();
    end += 1 + more;
  }
  if (s[end] != '\0' || lo < 1 || hi < lo || !(alpha >= 0)) return bad();
  return power_law_lengths(num_docs, lo, hi, alpha, seed);
}

// Synthetic data (passkey, recall, copy) is generated whole in memory (progress: documents
// generated), then written.
DatasetInfo prepare_synthetic(const PrepareOptions& o, std::ostream& out, const Provenance& prov) {
  const std::string& synthetic = name_of(synthetic_choices(), o.synthetic);
  if (!o.inputs.empty())
    fail("prepare: --synthetic ", synthetic, " generates its data; drop the input files, or ",
         "drop --synthetic to tokenize them");
  if (!o.doc_lengths.empty() && o.synthetic == SyntheticData::Recall)
    fail("prepare: --doc-lengths sets the lengths of --synthetic passkey and copy documents; ", synthetic,
         " documents take --doc-length: drop --doc-lengths");
  if (o.copy_repeats > 0 && o.synthetic != SyntheticData::Copy)
    fail("prepare: --copy-repeats shapes --synthetic copy's strings; ", synthetic,
         " documents have none: drop --copy-repeats");
  if (o.copy_gap_words > 0 && o.synthetic != SyntheticData::Copy)
    fail("prepare: --copy-gap-words shapes --synthetic copy's pairs; ", synthetic,
         " documents have none: drop --copy-gap-words");
  // --doc-lengths: the documents take the lengths in turn (document d: lengths[d % n]).
  const std::vector<int64_t> lengths = o.doc_lengths.empty() ? std::vector<int64_t>{o.doc_length}
                                       : o.doc_lengths.rfind("powerlaw:", 0) == 0
                                           ? drawn_lengths(o.doc_lengths, o.num_docs, uint64_t(o.seed))
                                           : parse_int_list(o.doc_lengths, "--doc-lengths");
  check_synthetic_fits_memory(o, lengths);
  Progress gen(out, "prepare: generating", o.progress_every);
  const auto done = [&](int64_t docs) { gen.update(double(docs), double(o.num_docs), "documents"); };
  SyntheticSpec spec{o.num_docs, o.doc_length, int32_t(o.key_digits), uint64_t(o.seed)};
  if (!o.doc_lengths.empty()) spec.doc_lengths = lengths;
  spec.copy_repeats = o.copy_repeats;
  spec.copy_gap_words = o.copy_gap_words;
  TokenDataset ds;
  if (o.synthetic == SyntheticData::Passkey) {
    ds = make_passkey_dataset(spec, done);
    if (o.loss_on == LossOn::Answers) ds.loss_weights = passkey_answer_mask(ds);
  } else {  // recall and copy mark their answers as they write them
    ds = o.synthetic == SyntheticData::Recall ? make_recall_dataset(spec, done) : make_copy_dataset(spec, done);
    if (o.loss_on == LossOn::All) ds.loss_weights.clear();
  }
  write_dataset_file(o.out, ds, prov, o.force);
  return ds;
}

// Text files are streamed: read in pieces, cut into documents, encoded a batch at a time on
// every thread (output in input order) and appended to the file. What is held: one piece,
// one batch of documents and their ids (about 5 bytes per byte of text), the document being
// cut (a whole file when there is no --separator) and the offsets. A batch of 4 MiB is
// hundreds of documents of usual sizes: enough to keep every thread busy.
constexpr size_t kPieceBytes = size_t(1) << 20;
constexpr size_t kBatchBytes = size_t(4) << 20;

[[noreturn]] void fail_no_text() { fail("the input holds no text: every file (or piece) is empty"); }

// Cuts every input file into documents appended to `docs`, reading each in pieces;
// `after(file, bytes)` is told each piece read (and each file's end, with 0 bytes).
void cut_documents(const PrepareOptions& o, std::vector<TextDocument>& docs,
                   const std::function<void(size_t file, size_t bytes)>& after) {
  const std::string separator = unescape(o.separator);
  for (size_t file = 0; file < o.inputs.size(); ++file) {
    DocumentSplitter split(separator, file);
    read_text_in_pieces(o.inputs[file], kPieceBytes, [&](std::string_view piece) {
      split.feed(piece, docs);
      after(file, piece.size());
    });
    split.finish(docs);
    after(file, 0);
  }
}

// Documents in, a batch at a time: each full batch (kBatchBytes of text) is encoded on every
// thread and appended to the file.
class BatchEncoder {
 public:
  BatchEncoder(DatasetWriter& writer, const std::vector<std::string>& file_names, EncodeDocument encode)
      : writer_(writer), file_names_(file_names), encode_(std::move(encode)) {}
  std::vector<TextDocument> batch;  // documents added, not yet encoded
  int64_t appended = 0;             // documents encoded and appended

  // Counts the documents added to `batch` since the last call; encodes the batch when full.
  void added() {
    for (; counted_ < batch.size(); ++counted_) bytes_ += batch[counted_].text.size();
    if (bytes_ >= kBatchBytes) flush();
  }

  void flush() {
    std::vector<std::vector<int32_t>> ids = encode_documents(batch, file_names_, encode_);
    batch.clear();
    counted_ = bytes_ = 0;
    std::vector<int64_t> lengths;
    size_t total = 0;
    for (const auto& v : ids) total += v.size();
    std::vector<int32_t> flat;  // each document's ids freed once copied: one copy at a time
    flat.reserve(total);
    for (auto& v : ids) {
      flat.insert(flat.end(), v.begin(), v.end());
      lengths.push_back(int64_t(v.size()));
      std::vector<int32_t>().swap(v);
    }
    writer_.append(flat.data(), nullptr, lengths);
    appended += int64_t(lengths.size());
  }

 private:
  DatasetWriter& writer_;
  const std::vector<std::string>& file_names_;
  EncodeDocument encode_;
  size_t counted_ = 0, bytes_ = 0;
};

// --tokenizer-model: a SentencePiece .model file, or an lctrain file that holds one (the
// dataset, model file or checkpoint whose tokenizer held-out data must share).
struct TokenizerModelFile {
  std::string bytes;
  bool held = false;  // by an lctrain file
};
TokenizerModelFile read_tokenizer_model(const std::string& path) {
  if (const std::optional<TokenizerInfo> t = read_file_tokenizer(path)) {
    if (t->model.empty())
      fail("--tokenizer-model '", path, "' is an lctrain file that holds no SentencePiece model (its ids ",
           "are the byte tokenizer's): prepare with --tokenizer byte (the default), or give a file that ",
           "holds one");
    return {t->model, true};
  }
  return {read_text_file(path), false};
}

// An existing SentencePiece model (--tokenizer-model), or one trained here on `corpus`
// (--tokenizer bpe|unigram), described; the byte tokenizer otherwise.
std::unique_ptr<Tokenizer> make_prepare_tokenizer(const PrepareOptions& o,
                                                  const std::vector<TextDocument>& corpus,
                                                  std::ostream& out) {
  if (o.tokenizer == TokenizerKind::Byte && o.tokenizer_model.empty()) return std::make_unique<ByteTokenizer>();
  std::unique_ptr<SentencePieceTokenizer> t;
  if (!o.tokenizer_model.empty()) {
    const TokenizerModelFile file = read_tokenizer_model(o.tokenizer_model);
    t = std::make_unique<SentencePieceTokenizer>(file.bytes,
                                                 cat("--tokenizer-model '", o.tokenizer_model, "'"),
                                                 "give the .model file SentencePiece training wrote "
                                                 "(spm_train, the Python package, a Llama 2 tokenizer.model), "
                                                 "or an lctrain dataset, model file or checkpoint that holds one");
    out << "tokenizer: SentencePiece model " << (file.held ? "held by '" : "'") << o.tokenizer_model << "'";
  } else {
    out << timestamp() << "prepare: training a " << name_of(tokenizer_choices(), o.tokenizer) << " tokenizer of " << o.vocab_size
        << " pieces on " << corpus.size() << " documents (one thread)" << std::endl;
    const double t0 = omp_get_wtime();
    std::vector<std::string_view> text(corpus.size());
    for (size_t d = 0; d < corpus.size(); ++d) text[d] = corpus[d].text;
    t = std::make_unique<SentencePieceTokenizer>(train_sentencepiece(text, name_of(tokenizer_choices(), o.tokenizer), o.vocab_size),
                                                 "the trained model");
    out << "tokenizer: trained in " << std::fixed << std::setprecision(1) << omp_get_wtime() - t0 << " s";
  }
  const TokenizerInfo& i = t->info();
  out << ": " << i.describe() << " (bos " << i.bos_id << ", eos " << i.eos_id << ", pad " << i.pad_id
      << ")\n";
  if (!t->byte_fallback())
    out << "warning: the model has no byte fallback: characters outside its vocabulary become its "
           "unk piece, and decoding does not give the text back\n";
  return t;
}

DatasetInfo prepare_texts(const PrepareOptions& o, std::ostream& out, const Provenance& prov) {
  if (o.loss_on != LossOn::All)
    fail("prepare: --loss-on ", name_of(loss_on_choices(), o.loss_on), " needs answers to find, which only --synthetic passkey, ",
         "recall and copy mark; drop --loss-on for text files");
  if (!o.doc_lengths.empty())
    fail("prepare: --doc-lengths sets the lengths of --synthetic passkey and copy documents; text files keep ",
         "their own: drop --doc-lengths");
  if (o.inputs.empty())
    fail("prepare: no input: give UTF-8 text files, or --synthetic passkey");
  double all_bytes = 0;
  for (const std::string& path : o.inputs) {
    std::error_code ec;  // an unreadable file is reported by read_text_in_pieces
    const auto bytes = std::filesystem::file_size(path, ec);
    if (!ec) all_bytes += double(bytes);
  }
  // A tokenizer trained here (--tokenizer bpe|unigram) learns from the whole corpus before
  // any document can be encoded: the documents are cut first and held (progress: MB read),
  // then encoded from memory. Byte and --tokenizer-model stream.
  const bool train = o.tokenizer != TokenizerKind::Byte && o.tokenizer_model.empty();
  std::vector<TextDocument> corpus;
  if (train) {
    Progress reading(out, "prepare: reading", o.progress_every);
    double read_bytes = 0;
    cut_documents(o, corpus, [&](size_t file, size_t bytes) {
      read_bytes += double(bytes);
      reading.update(read_bytes / 1e6, all_bytes / 1e6, "MB",
                     cat(" from ", file + 1, " of ", o.inputs.size(), " files"));
    });
    if (corpus.empty()) fail_no_text();
    check_utf8(corpus, o.inputs);  // before training: SentencePiece would learn from broken text
  }
  const std::unique_ptr<Tokenizer> tokenizer = make_prepare_tokenizer(o, corpus, out);
  // The tokenizer: its description, and the one step that is its own (text -> ids).
  DatasetInfo info = tokenizer->empty_dataset();
  const Tokenizer& tok = *tokenizer;
  const EncodeDocument encode = [&tok](std::string_view text) { return tok.encode_document(text); };
  // About one id per byte of text or fewer (SentencePiece pieces hold several): the stored
  // size, uncompressed, is reserved first.
  DatasetWriter writer(o.out, info, o.force,
                       double(dataset_id_bytes(info.vocab_size)) * all_bytes + double(info.tokenizer_model.size()));
  BatchEncoder encoder(writer, o.inputs, encode);

  Progress progress(out, "prepare: tokenizing", o.progress_every);
  double done_bytes = 0;
  auto report = [&](size_t file, size_t bytes) {
    done_bytes += double(bytes);
    const int64_t cut = encoder.appended + int64_t(encoder.batch.size());  // documents read so far
    progress.update(done_bytes / 1e6, all_bytes / 1e6, "MB",
                    cat(" from ", file + 1, " of ", o.inputs.size(), " files into ", cut, " documents, ",
                        int64_t(double(cut) / std::max(progress.seconds(), 1e-9)), " documents/s"));
  };
  if (train) {
    for (TextDocument& d : corpus) {  // moved into the batches: the corpus shrinks as it is encoded
      const size_t file = d.file, bytes = d.text.size();
      encoder.batch.push_back(std::move(d));
      encoder.added();
      report(file, bytes);
    }
    std::vector<TextDocument>().swap(corpus);
  } else {
    cut_documents(o, encoder.batch, [&](size_t file, size_t bytes) {
      encoder.added();
      report(file, bytes);
    });
  }
  encoder.flush();
  if (encoder.appended == 0) fail_no_text();
  std::string names;
  for (size_t i = 0; i < o.inputs.size() && i < 3; ++i) names += (i ? ", " : "") + o.inputs[i];
  if (o.inputs.size() > 3) names += cat(" and ", o.inputs.size() - 3, " more");
  info.source = cat("text: ", names);
  info.doc_offsets = writer.doc_offsets();
  writer.finish(info.source, {}, prov);
  return info;
}

}  // namespace

int cmd_prepare(Context& ctx) {
  ctx.print_startup("prepare", false);
  if (!ctx.world.root()) return kExitOk;
  const PrepareOptions& o = ctx.inv.prepare;
  const double t0 = omp_get_wtime();
  const DatasetInfo ds = o.synthetic == SyntheticData::None ? prepare_texts(o, ctx.out(), ctx.provenance())
                                             : prepare_synthetic(o, ctx.out(), ctx.provenance());
  const double secs = omp_get_wtime() - t0;

  int64_t longest = 0;
  for (int64_t d = 0; d < ds.num_docs(); ++d) longest = std::max(longest, ds.doc_length(d));
  std::ostream& out = ctx.out();
  out << "wrote " << o.out << ": " << ds.num_docs() << " documents, " << ds.num_tokens()
      << " tokens (" << ds.source << ")\n"
      << "tokens per document: mean " << std::fixed << std::setprecision(1)
      << double(ds.num_tokens()) / double(ds.num_docs()) << ", max " << longest << "\n"
      << timestamp() << "prepared in " << std::setprecision(2) << secs << " s: " << std::setprecision(0)
      << double(ds.num_docs()) / secs << " documents/s, " << std::setprecision(1)
      << double(ds.num_tokens()) / secs / 1e6 << " M tokens/s\n" << std::setprecision(1);
  if (o.seq_len > 0) {
    const Packing p = pack_documents(ds.doc_offsets, o.seq_len);
    out << "packing at seq_len " << o.seq_len << ": " << p.sequences.size() << " sequences, "
        << "efficiency " << 100.0 * p.efficiency() << "% (real tokens / slots)";
    if (p.split_docs) out << ", " << p.split_docs << " documents longer than a sequence are split";
    out << "\n";
  }
  out << std::flush;
  return kExitOk;
}

}  // namespace lct
