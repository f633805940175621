// lctrain prepare: text files or synthetic passkey data -> a dataset file, with the
// statistics that decide the sequence length (tokens per document, packing efficiency).
#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <iostream>

#include <omp.h>

#include "app/context.hpp"
#include "app/progress.hpp"
#include "app/train_setup.hpp"
#include "common/error.hpp"
#include "data/packing.hpp"
#include "data/passkey.hpp"
#include "data/text.hpp"
#include "data/text_stream.hpp"
#include "data/tokenizer.hpp"
#include "io/dataset_file.hpp"
#include "io/text_files.hpp"
#include "sys/memory.hpp"

namespace lct {

namespace {

// The whole dataset is built in memory before it is written: 4 bytes per token id (8 with
// --loss-on answers: the mask, as floats), plus one
// document's text and ids (about 10 bytes per token) while it is generated. Counted in
// double, so that sizes past 64 bits are refused too instead of overflowing.
void check_passkey_fits_memory(const PrepareOptions& o) {
  const double tokens = double(o.num_docs) * double(o.doc_length);
  const double per_token = o.loss_on == "answers" ? 8.0 : 4.0;  // ids, and the mask as floats
  const double need = per_token * tokens + 10.0 * double(o.doc_length) + 28.0 * double(o.num_docs);
  const double avail = available_memory().bytes;
  if (avail <= 0 || need <= 0.95 * avail) return;
  fail("prepare: --num-docs ", o.num_docs, " x --doc-length ", o.doc_length, " = ", tokens,
       " tokens need about ", gib(need), " of memory (the dataset is built whole before it is ",
       "written, ", per_token, " bytes per token) but ", gib(avail),
       " are available; use fewer documents (--num-docs) or shorter ones (--doc-length)");
}

// Passkey data is generated whole in memory (progress: documents generated), then written.
DatasetInfo prepare_passkey(const PrepareOptions& o, std::ostream& out, const Provenance& prov) {
  if (!o.inputs.empty())
    fail("prepare: --synthetic passkey generates its data; drop the input files, or drop ",
         "--synthetic to tokenize them");
  check_passkey_fits_memory(o);
  Progress gen(out, "prepare: generating", o.progress_every);
  const PasskeySpec spec{o.num_docs, o.doc_length, int32_t(o.key_digits), uint64_t(o.seed)};
  TokenDataset ds = make_passkey_dataset(spec, [&](int64_t docs) {
    gen.update(double(docs), double(o.num_docs), "documents");
  });
  if (o.loss_on == "answers") ds.loss_weights = passkey_answer_mask(ds);
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

DatasetInfo prepare_texts(const PrepareOptions& o, std::ostream& out, const Provenance& prov) {
  if (o.loss_on != "all")
    fail("prepare: --loss-on ", o.loss_on, " needs answers to find, which only --synthetic passkey ",
         "marks; drop --loss-on for text files");
  if (o.inputs.empty())
    fail("prepare: no input: give UTF-8 text files, or --synthetic passkey");
  double all_bytes = 0;
  for (const std::string& path : o.inputs) {
    std::error_code ec;  // an unreadable file is reported by read_text_in_pieces
    const auto bytes = std::filesystem::file_size(path, ec);
    if (!ec) all_bytes += double(bytes);
  }
  // The tokenizer: its description, and the one step that is its own (text -> ids).
  DatasetInfo info = ByteTokenizer::empty_dataset();
  const EncodeDocument encode = [](std::string_view text) { return ByteTokenizer::encode_document(text); };
  // About one id per byte of text: the stored size, uncompressed, is reserved first.
  DatasetWriter writer(o.out, info, o.force, double(dataset_id_bytes(info.vocab_size)) * all_bytes);
  const std::string separator = unescape(o.separator);

  Progress progress(out, "prepare: tokenizing", o.progress_every);
  std::vector<TextDocument> batch;
  size_t batch_bytes = 0, file = 0;
  double done_bytes = 0;
  int64_t docs = 0;
  auto flush = [&] {
    std::vector<std::vector<int32_t>> ids = encode_documents(batch, o.inputs, encode);
    batch.clear();
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
    writer.append(flat.data(), nullptr, lengths);
    docs += int64_t(lengths.size());
    batch_bytes = 0;
  };
  auto take = [&](size_t before) {  // count what the splitter added; encode a full batch
    for (size_t i = before; i < batch.size(); ++i) batch_bytes += batch[i].text.size();
    if (batch_bytes >= kBatchBytes) flush();
  };
  for (; file < o.inputs.size(); ++file) {
    DocumentSplitter split(separator, file);
    read_text_in_pieces(o.inputs[file], kPieceBytes, [&](std::string_view piece) {
      const size_t before = batch.size();
      split.feed(piece, batch);
      take(before);
      done_bytes += double(piece.size());
      const int64_t cut = docs + int64_t(batch.size());  // documents read so far
      progress.update(done_bytes / 1e6, all_bytes / 1e6, "MB",
                      cat(" from ", file + 1, " of ", o.inputs.size(), " files into ", cut, " documents, ",
                          int64_t(double(cut) / std::max(progress.seconds(), 1e-9)), " documents/s"));
    });
    const size_t before = batch.size();
    split.finish(batch);
    take(before);
  }
  flush();
  if (docs == 0) fail("the input holds no text: every file (or piece) is empty");
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
  const DatasetInfo ds = o.synthetic == "passkey" ? prepare_passkey(o, ctx.out(), ctx.provenance())
                                                  : prepare_texts(o, ctx.out(), ctx.provenance());
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
