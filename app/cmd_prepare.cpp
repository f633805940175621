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

// Each phase prints its own progress lines (rate and time left are the phase's): documents
// generated, or megabytes of text read, then tokenized.
TokenDataset build(const PrepareOptions& o, std::ostream& out) {
  if (o.synthetic == "passkey") {
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
    return ds;
  }
  if (o.loss_on != "all")
    fail("prepare: --loss-on ", o.loss_on, " needs answers to find, which only --synthetic passkey ",
         "marks; drop --loss-on for text files");
  if (o.inputs.empty())
    fail("prepare: no input: give UTF-8 text files, or --synthetic passkey");
  std::vector<TextSource> sources;
  double read_mb = 0, all_mb = 0;
  for (const std::string& path : o.inputs) {
    std::error_code ec;  // an unreadable file is reported by read_text_file
    const auto bytes = std::filesystem::file_size(path, ec);
    if (!ec) all_mb += double(bytes) / 1e6;
  }
  Progress reading(out, "prepare: reading", o.progress_every);
  for (const std::string& path : o.inputs) {
    sources.push_back({path, read_text_file(path)});
    read_mb += double(sources.back().text.size()) / 1e6;
    reading.update(read_mb, all_mb, "MB",
                   cat(" from ", sources.size(), " of ", o.inputs.size(), " files"));
  }
  Progress tokenizing(out, "prepare: tokenizing", o.progress_every);
  return tokenize_texts(sources, unescape(o.separator), [&](int64_t docs, size_t bytes) {
    tokenizing.update(double(bytes) / 1e6, read_mb, "MB", cat(" into ", docs, " documents"));
  });
}

}  // namespace

int cmd_prepare(Context& ctx) {
  ctx.print_startup("prepare", false);
  if (!ctx.world.root()) return kExitOk;
  const PrepareOptions& o = ctx.inv.prepare;
  const double t0 = omp_get_wtime();
  const TokenDataset ds = build(o, ctx.out());
  write_dataset_file(o.out, ds, ctx.provenance(), o.force);
  const double secs = omp_get_wtime() - t0;

  int64_t longest = 0;
  for (int64_t d = 0; d < ds.num_docs(); ++d) longest = std::max(longest, ds.doc_length(d));
  std::ostream& out = ctx.out();
  out << "wrote " << o.out << ": " << ds.num_docs() << " documents, " << ds.tokens.size()
      << " tokens (" << ds.source << ")\n"
      << "tokens per document: mean " << std::fixed << std::setprecision(1)
      << double(ds.tokens.size()) / double(ds.num_docs()) << ", max " << longest << "\n"
      << timestamp() << "prepared in " << std::setprecision(2) << secs << " s: " << std::setprecision(0)
      << double(ds.num_docs()) / secs << " documents/s, " << std::setprecision(1)
      << double(ds.tokens.size()) / secs / 1e6 << " M tokens/s\n" << std::setprecision(1);
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
