#include "io/dataset_file.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"
#include "io/atomic.hpp"
#include "io/h5.hpp"
#include "io/tokenizer_group.hpp"

namespace lct {

namespace {

// The smallest unsigned type that holds every id of a vocabulary of `vocab` ids.
hid_t token_file_type(int64_t vocab) {
  if (vocab <= (int64_t(1) << 8)) return H5T_STD_U8LE;
  if (vocab <= (int64_t(1) << 16)) return H5T_STD_U16LE;
  return H5T_STD_U32LE;
}

}  // namespace

int64_t dataset_id_bytes(int64_t vocab) { return int64_t(H5Tget_size(token_file_type(vocab))); }

namespace {

// A 1-D chunked array that grows by appends: shuffle (for multi-byte types), deflate, then a
// fletcher32 checksum of each stored chunk.
//
// Chunks of kDatasetChunkTokens = 32768 elements (32-128 KiB of ids): a training read is one
// packed sequence, a contiguous token range, and decompresses the chunks it touches, so a
// sequence of S tokens costs at most S + 2 x 32768 tokens of decompression; smaller chunks
// would waste less on short sequences but compress worse (deflate's window is 32 KiB) and
// index more chunks. Deflate level 1: the fastest to write; reading, what every training
// step pays, decompresses at the same speed whatever the level.
class Appender {
 public:
  Appender(const h5::File& f, const std::string& name, hid_t file_type) : f_(f), name_(name) {
    if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) <= 0)
      fail("this HDF5 library has no deflate (zlib) filter: dataset files cannot be written; ",
           "use an HDF5 build with zlib (Debian's has it)");
    const hsize_t zero = 0, unlimited = H5S_UNLIMITED, chunk = hsize_t(kDatasetChunkTokens);
    h5::Handle space(H5Screate_simple(1, &zero, &unlimited), H5Sclose);
    h5::Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_chunk(dcpl, 1, &chunk);
    if (H5Tget_size(file_type) > 1) H5Pset_shuffle(dcpl);
    H5Pset_deflate(dcpl, 1);
    H5Pset_fletcher32(dcpl);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    d_ = h5::Handle(H5Dcreate2(f.h, name.c_str(), file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
                    H5Dclose);
    if (!d_.valid())
      throw Error(cat(h5::where(f, name), ": cannot create dataset (HDF5: ", h5::last_error(), ")"));
  }

  // Appends data[n], converted from `mem_type` to the file's type.
  void append(const void* data, hid_t mem_type, int64_t n) {
    if (n == 0) return;
    const hsize_t start = size_, count = hsize_t(n), end = size_ + count;
    bool ok = H5Dset_extent(d_, &end) >= 0;
    h5::Handle file_space(H5Dget_space(d_), H5Sclose);
    h5::Handle mem_space(H5Screate_simple(1, &count, nullptr), H5Sclose);
    ok = ok && H5Sselect_hyperslab(file_space, H5S_SELECT_SET, &start, nullptr, &count, nullptr) >= 0;
    ok = ok && H5Dwrite(d_, mem_type, mem_space, file_space, H5P_DEFAULT, data) >= 0;
    if (!ok)
      throw Error(cat(h5::where(f_, name_), ": write failed (disk full or I/O error?) (HDF5: ",
                      h5::last_error(), ")"));
    size_ = end;
  }

 private:
  const h5::File& f_;
  std::string name_;
  h5::Handle d_;
  hsize_t size_ = 0;
};

// Loss weights of only 0 and 1 are a mask, stored as uint8; others as float32.
bool is_mask(const std::vector<float>& w) {
  return std::all_of(w.begin(), w.end(), [](float x) { return x == 0.0f || x == 1.0f; });
}

}  // namespace

struct DatasetWriter::Impl {
  AtomicTarget target;  // declared first: outlives the file, then removes it unless committed
  h5::File f;
  std::unique_ptr<Appender> tokens, weights;
  Impl(const std::string& path, bool force) : target(path, force, "dataset file") {}
};

DatasetWriter::DatasetWriter(const std::string& path, const DatasetInfo& tokenizer, bool force,
                             double reserve_bytes, Weights weights)
    : impl_(std::make_unique<Impl>(path, force)), header_(tokenizer), weights_(weights) {
  header_.doc_offsets.clear();
  header_.passkey = {};
  if (header_.vocab_size <= 0) fail("dataset for '", path, "': vocab_size is ", header_.vocab_size, ", must be positive");
  impl_->f = h5::File::create(impl_->target, reserve_bytes, "dataset file");
  impl_->tokens = std::make_unique<Appender>(impl_->f, "tokens", token_file_type(header_.vocab_size));
  if (weights != Weights::None)
    impl_->weights = std::make_unique<Appender>(impl_->f, "loss_weights",
                                                weights == Weights::Mask ? H5T_STD_U8LE : H5T_IEEE_F32LE);
}

DatasetWriter::~DatasetWriter() = default;

void DatasetWriter::append(const int32_t* tokens, const float* weights, const std::vector<int64_t>& lengths) {
  int64_t n = 0;
  for (int64_t len : lengths) n += len;
  const std::string where = cat("dataset for '", impl_->target.final_path(), "'");
  check_ids(tokens, n, offsets_.back(), header_.vocab_size, where);
  if ((weights != nullptr) != (weights_ != Weights::None))
    fail(where, ": loss weights given for a file ", weights ? "without" : "with", " a loss_weights array");
  for (int64_t i = 0; weights && i < n; ++i)
    if (!std::isfinite(weights[i]) || weights[i] < 0 || (weights_ == Weights::Mask && weights[i] != 0 && weights[i] != 1))
      fail(where, ": loss weight ", weights[i], " at position ", offsets_.back() + i, " must be finite and ",
           weights_ == Weights::Mask ? "0 or 1 (a mask)" : "non-negative");
  impl_->tokens->append(tokens, H5T_NATIVE_INT32, n);
  if (weights) impl_->weights->append(weights, H5T_NATIVE_FLOAT, n);  // a mask's 0/1 convert exactly
  for (int64_t len : lengths) offsets_.push_back(offsets_.back() + len);
}

void DatasetWriter::finish(const std::string& source, const PasskeyAnswers& passkey, const Provenance& prov) {
  DatasetInfo info = header_;
  info.doc_offsets = offsets_;
  info.source = source;
  info.passkey = passkey;
  const std::string where = cat("dataset for '", impl_->target.final_path(), "'");
  if (info.num_docs() == 0) fail(where, ": no documents");
  validate_info(info, offsets_.back(), where);
  h5::File& f = impl_->f;
  h5::write_kind(f, "dataset", kDatasetFormatVersion);
  h5::write_attr(f.h, "vocab_size", info.vocab_size);
  h5::write_attr(f.h, "tokenizer", info.tokenizer);
  h5::write_attr(f.h, "bos_token_id", int64_t(info.bos_id));
  h5::write_attr(f.h, "eos_token_id", int64_t(info.eos_id));
  h5::write_attr(f.h, "pad_token_id", int64_t(info.pad_id));
  h5::write_attr(f.h, "n_documents", info.num_docs());
  h5::write_attr(f.h, "n_tokens", info.num_tokens());
  h5::write_attr(f.h, "source", info.source);
  h5::write_array(f, f.h, "doc_offsets", info.doc_offsets.data(), {int64_t(info.doc_offsets.size())});
  if (!passkey.empty()) {
    h5::create_group(f, f.h, "passkey");
    const int64_t nd = info.num_docs();
    h5::write_array(f, f.h, "passkey/answer_offset", passkey.answer_offset.data(), {nd});
    h5::write_array(f, f.h, "passkey/answer_length", passkey.answer_length.data(), {nd});
    h5::write_array(f, f.h, "passkey/depth", passkey.depth.data(), {nd});
  }
  // A sentencepiece dataset carries its model, so that the file alone decodes its ids.
  if (!info.tokenizer_model.empty()) write_tokenizer_group(f, tokenizer_info(info));
  h5::write_provenance(f, prov);
  impl_->tokens.reset();
  impl_->weights.reset();
  f.close();
  impl_->target.commit();
}

void write_dataset_file(const std::string& path, const TokenDataset& ds, const Provenance& prov,
                        bool force) {
  validate(ds, cat("dataset for '", path, "'"));
  const bool has_weights = !ds.loss_weights.empty(), mask = is_mask(ds.loss_weights);
  const double n = double(ds.tokens.size());
  // Reserved before writing: the uncompressed size, an upper bound.
  const double bytes = double(H5Tget_size(token_file_type(ds.vocab_size))) * n +
                       (has_weights ? (mask ? 1.0 : 4.0) * n : 0.0) +
                       8.0 * double(ds.doc_offsets.size() + 3 * ds.num_docs()) +
                       double(ds.tokenizer_model.size());
  DatasetWriter w(path, ds, force, bytes,
                  !has_weights ? DatasetWriter::Weights::None
                  : mask       ? DatasetWriter::Weights::Mask
                               : DatasetWriter::Weights::Float);
  std::vector<int64_t> lengths(size_t(ds.num_docs()));
  for (int64_t d = 0; d < ds.num_docs(); ++d) lengths[size_t(d)] = ds.doc_length(d);
  w.append(ds.tokens.data(), has_weights ? ds.loss_weights.data() : nullptr, lengths);
  w.finish(ds.source, ds.passkey, prov);
}

namespace {

// A 1-D array of the given class (H5T_NO_CLASS: integer or float), with `expected` entries
// when that is >= 0.
int64_t check_1d(const h5::File& f, hid_t loc, const std::string& name, H5T_class_t cls,
                 int64_t expected) {
  const h5::ArrayInfo info = h5::array_info(f, loc, name);
  const bool number = info.type_class == H5T_INTEGER || info.type_class == H5T_FLOAT;
  if (cls == H5T_NO_CLASS ? !number : info.type_class != cls)
    fail("dataset file ", h5::where(f, name), ": dtype is ", info.dtype, " but must be ",
         cls == H5T_INTEGER ? "an integer type" : cls == H5T_FLOAT ? "a float type" : "a number type");
  if (info.shape.size() != 1)
    fail("dataset file ", h5::where(f, name), ": shape is ", h5::shape_str(info.shape),
         " but must be one-dimensional");
  if (expected >= 0 && info.shape[0] != expected)
    fail("dataset file ", h5::where(f, name), ": has ", info.shape[0], " entries but ", expected,
         " were expected");
  return info.shape[0];
}

// Reads ranges of /tokens and /loss_weights by hyperslab; one open file per source.
class FileSource : public TokenSource {
 public:
  FileSource(const std::string& path, size_t cache_bytes);
  void read_tokens(int64_t begin, int64_t n, int32_t* out) override;
  void read_weights(int64_t begin, int64_t n, float* out) override;
  void read_points(const std::vector<int64_t>& at, int32_t* out) override;

 private:
  // Reads the selection `sel` of `d` (n elements) into out as `mem_type`.
  // Ids or weights [begin, begin + n) of dataset `d` into out, as mem_type.
  void read_range(const h5::Handle& d, const char* name, int64_t begin, int64_t n, hid_t mem_type, void* out);
  h5::Handle open(const char* name, size_t cache_bytes);
  h5::File f_;
  std::string where_;
  h5::Handle tokens_, weights_;
};

h5::Handle FileSource::open(const char* name, size_t cache_bytes) {
  // HDF5's default preemption policy (w0 = 0.75). w0 = 1 (evict fully read chunks first)
  // made HDF5 1.10.8 hold every chunk the fingerprint's reads went through: 200 MiB for
  // 10^8 tokens, where 0.75 stays at the cache's size (measured).
  h5::Handle dapl(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose);
  H5Pset_chunk_cache(dapl, 10007, cache_bytes, 0.75);
  h5::Handle d(H5Dopen2(f_.h, name, dapl), H5Dclose);
  if (!d.valid()) throw Error(cat(h5::where(f_, name), ": cannot open dataset (HDF5: ", h5::last_error(), ")"));
  return d;
}

FileSource::FileSource(const std::string& path, size_t cache_bytes)
    : f_(h5::File::open_read(path, "dataset file")), where_(h5::where(f_, "")) {
  const std::string& w = where_;
  // Format 1 (int32 tokens) is read as it is: the arrays differ only in type and storage.
  const int64_t version = h5::has_attr(f_.h, "format_version") ? h5::read_int(f_.h, "format_version", w) : 0;
  h5::check_kind(f_, "dataset file", {"dataset"}, version == 1 ? 1 : kDatasetFormatVersion);
  DatasetInfo& ds = info_;
  ds.vocab_size = h5::read_int(f_.h, "vocab_size", w);
  ds.tokenizer = h5::read_string(f_.h, "tokenizer", w);
  ds.bos_id = int32_t(h5::read_int(f_.h, "bos_token_id", w));
  ds.eos_id = int32_t(h5::read_int(f_.h, "eos_token_id", w));
  ds.pad_id = int32_t(h5::read_int(f_.h, "pad_token_id", w));
  if (h5::has_attr(f_.h, "source")) ds.source = h5::read_string(f_.h, "source", w);
  if (ds.tokenizer != "byte") {  // older files and byte datasets have no /tokenizer group
    const TokenizerInfo t = read_tokenizer_group(f_);
    if (t.name.empty())
      fail("dataset file ", w, " declares tokenizer '", ds.tokenizer, "' but holds no /tokenizer ",
           "group with its model; prepare it again");
    const TokenizerInfo declared = tokenizer_info(ds);
    if (t.name != declared.name || t.vocab_size != declared.vocab_size || t.bos_id != declared.bos_id ||
        t.eos_id != declared.eos_id || t.pad_id != declared.pad_id)
      fail("dataset file ", w, ": the root attributes (", declared.name, ", vocab_size ",
           declared.vocab_size, ", bos ", declared.bos_id, ", eos ", declared.eos_id, ", pad ",
           declared.pad_id, ") disagree with /tokenizer (", t.name, ", ", t.vocab_size, ", ", t.bos_id,
           ", ", t.eos_id, ", ", t.pad_id, "); the file is damaged or was edited: prepare it again");
    ds.tokenizer_type = t.type;
    ds.tokenizer_model = t.model;
  }

  // Integer ids of any width are accepted; out-of-range values fail the vocabulary check.
  const int64_t n_tokens = check_1d(f_, f_.h, "tokens", H5T_INTEGER, -1);
  const int64_t n_offsets = check_1d(f_, f_.h, "doc_offsets", H5T_INTEGER, -1);
  if (n_tokens == 0 || n_offsets < 2)
    fail("dataset file ", w, " holds no documents; prepare it from non-empty input");
  ds.doc_offsets.resize(size_t(n_offsets));
  h5::read_array(f_, f_.h, "doc_offsets", ds.doc_offsets.data());
  if (h5::exists(f_.h, "passkey")) {
    const int64_t n = n_offsets - 1;
    check_1d(f_, f_.h, "passkey/answer_offset", H5T_INTEGER, n);
    check_1d(f_, f_.h, "passkey/answer_length", H5T_INTEGER, n);
    check_1d(f_, f_.h, "passkey/depth", H5T_FLOAT, n);
    auto& pk = ds.passkey;
    pk.answer_offset.resize(size_t(n));
    pk.answer_length.resize(size_t(n));
    pk.depth.resize(size_t(n));
    h5::read_array(f_, f_.h, "passkey/answer_offset", pk.answer_offset.data());
    h5::read_array(f_, f_.h, "passkey/answer_length", pk.answer_length.data());
    h5::read_array(f_, f_.h, "passkey/depth", pk.depth.data());
  }
  validate_info(ds, n_tokens, cat("dataset file ", w));
  tokens_ = open("tokens", cache_bytes);
  if (h5::exists(f_.h, "loss_weights")) {
    check_1d(f_, f_.h, "loss_weights", H5T_NO_CLASS, n_tokens);
    weights_ = open("loss_weights", cache_bytes);
    has_weights_ = true;
  }
}

void FileSource::read_range(const h5::Handle& d, const char* name, int64_t begin, int64_t n, hid_t mem_type,
                            void* out) {
  h5::Handle space(H5Dget_space(d), H5Sclose);
  const hsize_t start = hsize_t(begin), count = hsize_t(n);
  H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, nullptr, &count, nullptr);
  h5::Handle mem(H5Screate_simple(1, &count, nullptr), H5Sclose);
  if (H5Dread(d, mem_type, mem, space, H5P_DEFAULT, out) < 0)
    throw Error(cat(h5::where(f_, name), ": read failed: the data is corrupt or truncated (checksum ",
                    "or I/O error) (HDF5: ", h5::last_error(), ")"));
}

void FileSource::read_tokens(int64_t begin, int64_t n, int32_t* out) {
  if (n <= 0) return;
  read_range(tokens_, "tokens", begin, n, H5T_NATIVE_INT32, out);
  check_ids(out, n, begin, info_.vocab_size, cat("dataset file ", where_));
}

void FileSource::read_weights(int64_t begin, int64_t n, float* out) {
  if (n <= 0) return;
  read_range(weights_, "loss_weights", begin, n, H5T_NATIVE_FLOAT, out);
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(out[i]) || out[i] < 0.0f)
      fail("dataset file ", where_, ": loss weight ", out[i], " at position ", begin + i,
           " must be finite and non-negative");
}

// The samples in runs that fit in one chunk's length, each run one range read (of at most
// kDatasetChunkTokens ids) from which its samples are picked: every chunk is decompressed at
// most once (reads move forward) and memory stays one chunk's worth.
void FileSource::read_points(const std::vector<int64_t>& at, int32_t* out) {
  std::vector<int32_t> range;
  for (size_t i = 0; i < at.size();) {
    size_t j = i + 1;
    while (j < at.size() && at[j] - at[i] < kDatasetChunkTokens) ++j;
    range.resize(size_t(at[j - 1] - at[i] + 1));
    read_tokens(at[i], int64_t(range.size()), range.data());
    for (size_t k = i; k < j; ++k) out[k] = range[size_t(at[k] - at[i])];
    i = j;
  }
}

}  // namespace

std::unique_ptr<TokenSource> open_dataset_file(const std::string& path, size_t cache_bytes) {
  return std::make_unique<FileSource>(path, cache_bytes);
}

TokenDataset read_dataset_file(const std::string& path) {
  std::unique_ptr<TokenSource> src = open_dataset_file(path);
  TokenDataset ds;
  static_cast<DatasetInfo&>(ds) = src->info();
  const int64_t n = ds.num_tokens();
  ds.tokens.resize(size_t(n));
  src->read_tokens(0, n, ds.tokens.data());
  if (src->has_weights()) {
    ds.loss_weights.resize(size_t(n));
    src->read_weights(0, n, ds.loss_weights.data());
  }
  validate(ds, cat("dataset file '", path, "'"));
  return ds;
}

}  // namespace lct
