#include "io/inspect.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <memory>

#include "common/knobs.hpp"
#include "common/error.hpp"
#include "common/stats.hpp"
#include "data/packing.hpp"
#include "data/passkey.hpp"
#include "data/sentencepiece.hpp"
#include "data/tokenizer.hpp"
#include "io/dataset_file.hpp"
#include "io/file_kind.hpp"
#include "io/h5.hpp"
#include "io/model_file.hpp"
#include "io/model_schema.hpp"
#include "io/run_dir.hpp"
#include "io/timing_file.hpp"

namespace lct {

namespace {

void print_provenance(const Provenance& p, std::ostream& out) {
  if (p.version.empty()) {
    out << "provenance: none recorded\n";
    return;
  }
  out << "provenance:\n"
      << "  written by    " << p.software << " " << p.version << " (git " << p.git_revision << ")\n"
      << "  date          " << p.date << "\n"
      << "  host          " << p.host << "\n"
      << "  command line  " << p.command_line << "\n"
      << "  configuration\n";
  for (const Setting& s : p.config)
    out << "    " << std::left << std::setw(34)
        << (s.section.empty() ? s.key : s.section + "." + s.key) << " " << to_string(s.value) << "\n";
}

Provenance provenance_of(const std::string& path) {
  h5::File f = h5::File::open_read(path, "file");
  return h5::read_provenance(f);
}

// What a checkpoint was trained with, and for SentencePiece the first pieces the model
// learned (after unk, BOS, EOS, PAD and the byte pieces), read from the checkpoint alone.
void print_tokenizer(const TokenizerInfo& t, std::ostream& out) {
  if (t.name.empty()) {
    out << "tokenizer: none recorded (model files from init or convert, and older checkpoints, have none)\n";
    return;
  }
  out << "tokenizer: " << t.describe() << " (bos " << t.bos_id << ", eos " << t.eos_id << ", pad "
      << t.pad_id << ")\n";
  if (t.name != SentencePieceTokenizer::kName) return;
  const SentencePieceTokenizer sp(t.model, "the checkpoint's tokenizer");
  out << "  first learned pieces:";
  int shown = 0;
  for (int32_t id = 0; id < t.vocab_size && shown < 12; ++id) {
    if (!sp.learned(id)) continue;
    out << " " << id << "=" << sp.piece(id);
    ++shown;
  }
  out << "\n";
}

void inspect_model(const InspectRequest& req, const std::string& kind, std::ostream& out) {
  const ModelData m = read_model_file(req.path);
  out << "lctrain " << kind << " file '" << req.path << "' (format_version " << kModelFormatVersion
      << ", all tensors present, shapes and checksums verified)\nconfig:\n";
  size_t width = 18;  // "head_dim (derived)"
  for (const auto& [name, v] : m.config.values()) width = std::max(width, name.size());
  for (const auto& [name, v] : m.config.values())
    out << "  " << std::left << std::setw(int(width)) << name << " " << to_string(v) << "\n";
  out << "  " << std::left << std::setw(int(width)) << "head_dim (derived)" << " "
      << m.config.head_dim() << "\n";
  out << "parameters: " << m.layout.num_parameters() << " in " << m.layout.tensors.size()
      << " tensors\n";
  print_tokenizer(m.tokenizer, out);
  if (req.tensors) {
    out << "  " << std::left << std::setw(48) << "tensor" << std::setw(14) << "shape"
        << std::right << std::setw(12) << "l2 norm" << std::setw(12) << "mean" << std::setw(12)
        << "std" << "\n";
    for (const TensorSpec& t : m.layout.tensors) {
      const float* w = m.params.data() + t.offset;
      double sum = 0, sq = 0;
      for (size_t i = 0; i < t.numel; ++i) {
        sum += w[i];
        sq += double(w[i]) * w[i];
      }
      const double n = double(t.numel), mean = sum / n;
      out << "  " << std::left << std::setw(48) << t.name << std::setw(14) << h5::shape_str(t.shape)
          << std::right << std::setprecision(5) << std::setw(12) << std::sqrt(sq) << std::setw(12)
          << mean << std::setw(12) << std::sqrt(std::max(0.0, sq / n - mean * mean)) << "\n";
    }
  }
  print_provenance(provenance_of(req.path), out);
}

// Timing tables of training runs: a summary; bench tables: every row.
void inspect_timing(const InspectRequest& req, const std::string& kind, std::ostream& out,
                    bool with_provenance = true) {
  const TimingTable t = read_timing_file(req.path);
  out << "lctrain " << kind << " file '" << req.path << "': " << t.rows() << " rows, columns:";
  for (const auto& c : t.columns) out << " " << c.name;
  out << "\n";
  for (const auto& [k, v] : t.summary)
    out << "  " << std::left << std::setw(30) << k << " " << to_string(v) << "\n";
  if (kind == "bench") {
    for (size_t r = 0; r < t.rows(); ++r) {
      out << " ";
      for (const auto& c : t.columns) out << " " << c.name << "=" << std::setprecision(4) << c.values[r];
      out << "\n";
    }
  } else if (const TimingColumn* loss = t.find("loss"); loss && t.rows() > 0) {
    const auto& step = t.find("step")->values;
    const auto& restart = t.find("restart")->values;
    const auto best = std::min_element(loss->values.begin(), loss->values.end());
    double skipped = 0;
    for (double x : t.find("skipped")->values) skipped += x;
    out << std::setprecision(5) << "  steps " << step.front() << " to " << step.back() << ", restarts "
        << *std::max_element(restart.begin(), restart.end()) << ", skipped updates " << skipped << "\n"
        << "  loss at step " << step.front() << " " << loss->values.front() << ", at step " << step.back() << " "
        << loss->values.back() << ", best " << *best << " (step " << step[size_t(best - loss->values.begin())]
        << ")\n"
        << "  median tokens/s " << median(t.find("tokens_per_s")->values) << ", median MFU "
        << 100 * median(t.find("mfu")->values) << "%\n  time split:";
    const auto is_phase = [](const std::string& n) {  // attn_fwd_s, ...: rank 0's seconds
      return n.size() > 2 && n.substr(n.size() - 2) == "_s" && n != "tokens_per_s" &&
             n.rfind("rank_", 0) != 0;
    };
    double total = 0;
    for (const auto& c : t.columns)
      if (is_phase(c.name))
        for (double x : c.values) total += x;
    for (const auto& c : t.columns)
      if (is_phase(c.name)) {
        double sum = 0;
        for (double x : c.values) sum += x;
        out << " " << c.name.substr(0, c.name.size() - 2) << " " << std::setprecision(3)
            << 100 * sum / std::max(total, 1e-30) << "%";
      }
    out << "\n";
  }
  if (with_provenance) print_provenance(provenance_of(req.path), out);
}

// Attributes at the root and in /train_state, for eval results and checkpoints.
void print_attributes(const std::string& path, const std::string& group, std::ostream& out) {
  h5::File f = h5::File::open_read(path, "file");
  if (!group.empty() && !h5::exists(f.h, group)) return;
  h5::Handle g(H5Oopen(f.h, group.empty() ? "." : group.c_str(), H5P_DEFAULT), H5Oclose);
  out << (group.empty() ? "attributes" : group) << ":\n";
  for (const std::string& a : h5::attr_names(g)) {
    if (a == "report") continue;  // an eval file's printed results: print_eval_report
    out << "  " << std::left << std::setw(30) << a << " " << to_string(h5::read_attr(g, a, path)) << "\n";
  }
}

// An eval file's results as eval printed them (its `report` attribute; older files have the
// figures as attributes only).
void print_eval_report(const std::string& path, std::ostream& out) {
  h5::File f = h5::File::open_read(path, "eval file");
  if (h5::has_attr(f.h, "report")) out << h5::read_string(f.h, "report", h5::where(f, ""));
}

int64_t stored_dataset_version(const std::string& path) {
  h5::File f = h5::File::open_read(path, "dataset file");
  return h5::read_int(f.h, "format_version", h5::where(f, ""));
}

// "uint16 ids in chunks of 32768, compressed (deflate)", and the loss weights' type.
std::string dataset_storage(const std::string& path) {
  h5::File f = h5::File::open_read(path, "dataset file");
  auto describe = [&](const char* name) {
    const h5::ArrayInfo info = h5::array_info(f, f.h, name);
    h5::Handle d(H5Dopen2(f.h, name, H5P_DEFAULT), H5Dclose);
    h5::Handle dcpl(H5Dget_create_plist(d), H5Pclose);
    std::string s = info.dtype;
    hsize_t chunk = 0;
    if (H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_chunk(dcpl, 1, &chunk) == 1) s += cat(" in chunks of ", chunk);
    bool deflate = false;
    for (int i = 0; i < H5Pget_nfilters(dcpl); ++i) {
      unsigned flags = 0, cd[8];
      size_t ncd = 8;
      deflate = deflate || H5Pget_filter2(dcpl, unsigned(i), &flags, &ncd, cd, 0, nullptr, nullptr) == H5Z_FILTER_DEFLATE;
    }
    return s + (deflate ? ", compressed (deflate)" : ", uncompressed");
  };
  std::string s = "ids " + describe("tokens");
  if (h5::exists(f.h, "loss_weights")) s += "; loss weights " + describe("loss_weights");
  return s;
}

void inspect_dataset(const InspectRequest& req, std::ostream& out) {
  const TokenDataset ds = read_dataset_file(req.path);
  const int64_t n = ds.num_docs();
  int64_t lo = INT64_MAX, hi = 0;
  for (int64_t d = 0; d < n; ++d) {
    lo = std::min(lo, ds.doc_length(d));
    hi = std::max(hi, ds.doc_length(d));
  }
  const std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(tokenizer_info(ds), req.path);
  out << "lctrain dataset file '" << req.path << "' (format_version " << stored_dataset_version(req.path)
      << ", offsets, token ids and checksums verified)\n"
      << "  stored as   " << dataset_storage(req.path) << "\n"
      << "  source      " << ds.source << "\n"
      << "  tokenizer   " << tokenizer->info().describe() << " (bos " << ds.bos_id << ", eos "
      << ds.eos_id << ", pad " << ds.pad_id << ")\n"
      << "  documents   " << n << "\n"
      << "  tokens      " << ds.tokens.size() << "\n"
      << "  per document: mean " << std::fixed << std::setprecision(1)
      << double(ds.tokens.size()) / double(n) << ", min " << lo << ", max " << hi << "\n";
  if (!ds.loss_weights.empty()) {
    MemorySource src(ds);
    const LossWeightCount w = count_loss_weights(src);
    out << "  loss weights: " << w.weighted << " of " << w.targets << " targets weighted, mean weight "
        << std::setprecision(3) << (w.targets ? w.sum / double(w.targets) : 0.0) << std::setprecision(1) << "\n";
  }
  if (!ds.passkey.empty()) {
    int buckets[5] = {0};
    for (double d : ds.passkey.depth) ++buckets[passkey_depth_bucket(d, 5)];
    out << "  passkey depth buckets (0-20%, ..., 80-100%):";
    for (int b : buckets) out << " " << b;
    out << "\n";
  }
  if (req.seq_len > 0) {
    const Packing p = pack_documents(ds.doc_offsets, req.seq_len);
    out << "  packing at seq_len " << req.seq_len << ": " << p.sequences.size() << " sequences, "
        << std::setprecision(1) << 100.0 * p.efficiency() << "% real tokens, " << p.split_docs
        << " documents longer than a sequence\n";
  }
  const int64_t len0 = ds.doc_length(0);
  const std::string head = tokenizer->decode(ds.tokens.data(), size_t(std::min<int64_t>(len0, 120)), true);
  out << "  document 0 starts: " << head << (len0 > 120 ? "..." : "") << " (" << std::min<int64_t>(len0, 120)
      << " of its " << len0 << " tokens, decoded)\n";
  out.unsetf(std::ios::fixed);
  print_provenance(provenance_of(req.path), out);
}

// Any other HDF5 file: its objects, like h5ls -r.
herr_t list_object(hid_t loc, const char* name, const H5O_info_t* info, void* data) {
  auto& out = *static_cast<std::ostream*>(data);
  if (std::string(name) == ".") return 0;
  out << "  /" << name;
  if (info->type == H5O_TYPE_GROUP) out << "  (group)";
  if (info->type == H5O_TYPE_DATASET) {
    h5::Handle d(H5Dopen2(loc, name, H5P_DEFAULT), H5Dclose);
    h5::Handle s(H5Dget_space(d), H5Sclose);
    hsize_t dims[16];
    const int r = H5Sget_simple_extent_ndims(s);
    H5Sget_simple_extent_dims(s, dims, nullptr);
    out << "  dataset [";
    for (int i = 0; i < r; ++i) out << (i ? ", " : "") << dims[i];
    out << "]";
  }
  out << "\n";
  return 0;
}

void inspect_other(const InspectRequest& req, std::ostream& out) {
  h5::File f = h5::File::open_read(req.path, "file");
  out << "HDF5 file '" << req.path << "' (not an lctrain file: no '" << kFileKindAttr
      << "' attribute)\n";
  H5Ovisit2(f.h, H5_INDEX_NAME, H5_ITER_INC, list_object, &out, H5O_INFO_BASIC);
  h5::last_error();
}

std::string inspect_takes() {
  return cat("inspect shows an HDF5 file (lctrain's or any other) or a run directory (train's ", knob_name(Knob::RunDir), ")");
}

// A directory is a run directory once train has made checkpoints/ in it (before step 1) or
// written timing.h5; any other would be summarised as an empty run.
void check_run_dir(const RunDirectory& run) {
  namespace fs = std::filesystem;
  if (fs::exists(run.timing_path()) || fs::is_directory(fs::path(run.checkpoint_path(0)).parent_path()))
    return;
  fail("'", run.path(), "' is a directory but not a run directory (it holds neither timing.h5 nor ",
       "checkpoints/); ", inspect_takes());
}

// Anything but a regular file or a directory is refused before it is opened: opening a
// named pipe blocks until something writes to it. A missing path is left to the reader.
void check_openable(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || fs::is_regular_file(st) || fs::is_directory(st)) return;
  const char* what = fs::is_fifo(st)     ? "a named pipe (FIFO)"
                     : fs::is_socket(st) ? "a socket"
                     : fs::is_block_file(st) || fs::is_character_file(st) ? "a device"
                                                                          : "not a regular file";
  fail("'", path, "' is ", what, ", not a file: ", inspect_takes());
}

// A run directory: its timing table and every checkpoint, each opened and checked.
void inspect_run_dir(const InspectRequest& req, std::ostream& out) {
  const RunDirectory run(req.path, false);
  check_run_dir(run);
  out << "run directory '" << req.path << "'\n";
  if (std::filesystem::exists(run.timing_path()))
    inspect_timing({run.timing_path(), 0, false}, "timing", out, false);
  else
    out << "  no timing table yet\n";
  const std::vector<int64_t> steps = run.checkpoint_steps();
  out << "checkpoints: " << steps.size() << " (latest -> "
      << (run.latest().empty() ? "none" : run.latest()) << ")\n";
  for (const int64_t s : steps) {
    const std::string path = run.checkpoint_path(s);
    out << "  " << RunDirectory::checkpoint_name(s) << std::fixed << std::setprecision(1) << "  "
        << double(std::filesystem::file_size(path)) / double(1 << 20) << " MiB  ";
    try {
      h5::File f = h5::File::open_read(path, "checkpoint");
      h5::check_kind(f, "checkpoint", {"checkpoint"}, kModelFormatVersion);
      h5::Handle g = h5::open_group(f, "train_state");
      const std::string w = h5::where(f, "train_state");
      out << "step " << h5::read_int(g, "step", w) << ", restart " << h5::read_int(g, "restarts", w)
          << ", " << h5::read_int(g, "tokens_seen", w) << " tokens seen, dp x cp = "
          << h5::read_int(g, "dp", w) << " x " << h5::read_int(g, "cp", w) << "\n";
    } catch (const Error& e) {
      out << "DAMAGED: " << e.what() << "\n";
    }
  }
}
}  // namespace

void inspect_file(const InspectRequest& req, std::ostream& out) {
  check_openable(req.path);
  if (std::filesystem::is_directory(req.path)) return inspect_run_dir(req, out);
  const std::string kind = file_kind(req.path);
  if (kind == "model") return inspect_model(req, kind, out);
  if (kind == "checkpoint") {
    print_attributes(req.path, "train_state", out);
    return inspect_model(req, kind, out);
  }
  if (kind == "dataset") return inspect_dataset(req, out);
  if (kind == "timing" || kind == "bench") return inspect_timing(req, kind, out);
  if (kind == "eval") {
    out << "lctrain eval file '" << req.path << "'\n";
    print_eval_report(req.path, out);
    print_attributes(req.path, "", out);
    print_provenance(provenance_of(req.path), out);
    return;
  }
  if (kind.empty()) return inspect_other(req, out);
  fail("'", req.path, "' is an lctrain ", kind, " file, which this version cannot show");
}

}  // namespace lct
