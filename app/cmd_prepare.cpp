// lctrain prepare: text files or synthetic passkey data -> a dataset file, with the
// statistics that decide the sequence length (tokens per document, packing efficiency).
#include <algorithm>
#include <iomanip>
#include <iostream>

#include "app/context.hpp"
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

// The whole dataset is built in memory before it is written: 4 bytes per token id, plus one
// document's text and ids (about 10 bytes per token) while it is generated. Counted in
// double, so that sizes past 64 bits are refused too instead of overflowing.
void check_passkey_fits_memory(const PrepareOptions& o) {
  const double tokens = double(o.num_docs) * double(o.doc_length);
  const double need = 4.0 * tokens + 10.0 * double(o.doc_length) + 28.0 * double(o.num_docs);
  const double avail = available_memory().bytes;
  if (avail <= 0 || need <= 0.95 * avail) return;
  fail("prepare: --num-docs ", o.num_docs, " x --doc-length ", o.doc_length, " = ", tokens,
       " tokens need about ", gib(need), " of memory (the dataset is built whole before it is ",
       "written, 4 bytes per token, and train and eval load it whole on every rank) but ", gib(avail),
       " are available; use fewer documents (--num-docs) or shorter ones (--doc-length)");
}

TokenDataset build(const PrepareOptions& o) {
  if (o.synthetic == "passkey") {
    if (!o.inputs.empty())
      fail("prepare: --synthetic passkey generates its data; drop the input files, or drop ",
           "--synthetic to tokenize them");
    check_passkey_fits_memory(o);
    return make_passkey_dataset({o.num_docs, o.doc_length, int32_t(o.key_digits), uint64_t(o.seed)});
  }
  if (o.inputs.empty())
    fail("prepare: no input: give UTF-8 text files, or --synthetic passkey");
  std::vector<TextSource> sources;
  for (const std::string& path : o.inputs) sources.push_back({path, read_text_file(path)});
  return tokenize_texts(sources, unescape(o.separator));
}

}  // namespace

int cmd_prepare(Context& ctx) {
  ctx.print_startup("prepare", false);
  if (!ctx.world.root()) return kExitOk;
  const PrepareOptions& o = ctx.inv.prepare;
  const TokenDataset ds = build(o);
  write_dataset_file(o.out, ds, ctx.provenance(), o.force);

  int64_t longest = 0;
  for (int64_t d = 0; d < ds.num_docs(); ++d) longest = std::max(longest, ds.doc_length(d));
  std::ostream& out = ctx.out();
  out << "wrote " << o.out << ": " << ds.num_docs() << " documents, " << ds.tokens.size()
      << " tokens (" << ds.source << ")\n"
      << "tokens per document: mean " << std::fixed << std::setprecision(1)
      << double(ds.tokens.size()) / double(ds.num_docs()) << ", max " << longest << "\n";
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
