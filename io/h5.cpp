#include "io/h5.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "common/error.hpp"

namespace lct::h5 {

namespace {

// Switch off HDF5's printing of its error stack, once, before any call: lctrain reports
// errors itself, one message each.
struct Quiet {
  Quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }
} quiet_once;

herr_t innermost(unsigned n, const H5E_error2_t* e, void* out) {
  if (n == 0 && e->desc) *static_cast<std::string*>(out) = e->desc;
  return 0;
}

template <class T>
hid_t native_type() {
  if constexpr (std::is_same_v<T, float>) return H5T_NATIVE_FLOAT;
  if constexpr (std::is_same_v<T, double>) return H5T_NATIVE_DOUBLE;
  if constexpr (std::is_same_v<T, int32_t>) return H5T_NATIVE_INT32;
  if constexpr (std::is_same_v<T, int64_t>) return H5T_NATIVE_INT64;
  if constexpr (std::is_same_v<T, uint64_t>) return H5T_NATIVE_UINT64;
  if constexpr (std::is_same_v<T, uint8_t>) return H5T_NATIVE_UINT8;
}

Handle string_type() {
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  return t;
}

// h5py's convention for numpy bool: an 8-bit enum {FALSE = 0, TRUE = 1}.
Handle bool_type() {
  Handle t(H5Tenum_create(H5T_NATIVE_INT8), H5Tclose);
  int8_t v = 0;
  H5Tenum_insert(t, "FALSE", &v);
  v = 1;
  H5Tenum_insert(t, "TRUE", &v);
  return t;
}

std::string with_reason(const std::string& msg) {
  const std::string why = last_error();
  return why.empty() ? msg : cat(msg, " (HDF5: ", why, ")");
}

void check(herr_t rc, const std::string& what) {
  if (rc < 0) throw Error(with_reason(what));
}

Handle open_attr(hid_t obj, const std::string& name, const std::string& where) {
  if (!has_attr(obj, name))
    fail(where, ": attribute '", name, "' is missing; the file was not written by this ",
         "version of lctrain or is damaged");
  Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!a.valid()) throw Error(with_reason(cat(where, ": cannot open attribute '", name, "'")));
  return a;
}

std::string dtype_name(H5T_class_t cls, size_t size, bool is_signed) {
  switch (cls) {
    case H5T_FLOAT: return cat("float", size * 8);
    case H5T_INTEGER: return cat(is_signed ? "int" : "uint", size * 8);
    case H5T_STRING: return "string";
    case H5T_ENUM: return "enum";
    case H5T_COMPOUND: return "compound";
    default: return "other";
  }
}

}  // namespace

std::string last_error() {
  std::string msg;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost, &msg);
  H5Eclear2(H5E_DEFAULT);
  return msg;
}

namespace {
File create_with(const std::string& path, hid_t fapl) {
  // 1.8+ object headers and superblock carry checksums: damaged metadata is detected.
  H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
  // Closing fails while any object is still open, instead of silently deferring the flush.
  H5Pset_fclose_degree(fapl, H5F_CLOSE_SEMI);
  File f;
  f.path = path;
  f.h = Handle(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl), H5Fclose);
  if (!f.h.valid()) throw Error(with_reason(cat("cannot create HDF5 file '", path, "'")));
  f.created = true;
  return f;
}
}  // namespace

File File::create(const AtomicTarget& target, double data_bytes, const std::string& what,
                  const std::string& advice) {
  // Arrays are stored uncompressed; checksums, chunk indexes, attributes and provenance add
  // a little: 2% and 256 KiB cover them.
  const double bytes = 1.02 * data_bytes + double(256 << 10);
  check_free_space(target.final_path(), bytes, what, advice);  // a full disk: nothing created at all
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  File f = create_with(target.temp_path(), fapl);
  reserve_space(f.path, bytes, what, target.final_path(), advice);
  f.reserved = true;
  return f;
}

File File::create_parallel(const std::string& path, MPI_Comm comm) {
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL);
  // Metadata written collectively at close, instead of many small writes from each rank.
  H5Pset_coll_metadata_write(fapl, true);
  File f;
  f.path = path;
  f.comm = comm;
  MPI_Comm_rank(comm, &f.rank);
  agree_on(f, [&] {
    File made = create_with(path, fapl);
    f.h = std::move(made.h);
    f.created = true;
  });
  return f;
}

void agree(const File& f, bool ok, const std::string& what) {
  int mine = ok ? 1 : 0, all = mine;
  if (f.parallel()) MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, f.comm);
  if (!ok) throw Error(what);
  if (!all) fail(where(f, ""), ": writing failed on another rank (see its message)");
}

void agree_on(const File& f, const std::function<void()>& body) {
  std::string err;
  try {
    body();
  } catch (const Error& e) {
    err = e.what();
  }
  agree(f, err.empty(), err);
}

File File::open_read(const std::string& path, const std::string& what) {
  if (access(path.c_str(), F_OK) != 0) fail(what, " '", path, "' does not exist");
  if (access(path.c_str(), R_OK) != 0) fail(what, " '", path, "' is not readable");
  // Opening a named pipe would block until something writes to it.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    fail(what, " '", path, "' is ", S_ISDIR(st.st_mode) ? "a directory" : "not a regular file (a pipe, device or socket)",
         "; give an HDF5 file");
  File f;
  f.path = path;
  f.h = Handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!f.h.valid())
    throw Error(with_reason(cat(what, " '", path, "' cannot be opened as HDF5: it is not an ",
                                "HDF5 file, or it is truncated or corrupt")));
  return f;
}

void File::discard(hid_t id) {
  if (rank == 0) [[maybe_unused]] const int rc = ::truncate(path.c_str(), 0);
  if (parallel()) MPI_Barrier(comm);
  H5Fclose(id);
  last_error();
}

void File::close() {
  if (!h.valid()) return;
  const hid_t id = h.release();
  if (H5Fclose(id) >= 0) {
    if (reserved) release_reserve(path);
    return;
  }
  // HDF5 keeps a file it failed to flush open, but closing it again crashes HDF5 1.10: the
  // id is dropped. The reservation made in create() is what keeps a full disk from getting
  // here; a parallel close that failed on one rank only cannot be retried collectively
  // either: the ranks' writes are agreed before it instead.
  throw Error(with_reason(cat("writing HDF5 file '", path, "' failed (disk full or I/O error?)")));
}

File::~File() {
  if (h.valid() && created) discard(h.release());
}

std::string where(const File& f, const std::string& object) {
  return object.empty() ? cat("'", f.path, "'") : cat("'", f.path, "': '", object, "'");
}

bool exists(hid_t loc, const std::string& path) {
  const htri_t r = H5Lexists(loc, path.c_str(), H5P_DEFAULT);
  if (r < 0) last_error();
  return r > 0;
}

Handle open_group(const File& f, const std::string& name) {
  if (!exists(f.h, name)) fail(where(f, name), ": group is missing");
  Handle g(H5Gopen2(f.h, name.c_str(), H5P_DEFAULT), H5Gclose);
  if (!g.valid()) throw Error(with_reason(cat(where(f, name), ": cannot open group")));
  return g;
}

Handle create_group(const File& f, hid_t loc, const std::string& name) {
  Handle g(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (!g.valid()) throw Error(with_reason(cat(where(f, name), ": cannot create group")));
  return g;
}

void write_attr(hid_t obj, const std::string& name, const Value& v) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  auto put = [&](hid_t file_type, hid_t mem_type, const void* data) {
    Handle a(H5Acreate2(obj, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    if (!a.valid() || H5Awrite(a, mem_type, data) < 0)
      throw Error(with_reason(cat("cannot write attribute '", name, "'")));
  };
  if (auto* i = std::get_if<int64_t>(&v)) {
    put(H5T_STD_I64LE, H5T_NATIVE_INT64, i);
  } else if (auto* d = std::get_if<double>(&v)) {
    put(H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, d);
  } else if (auto* b = std::get_if<bool>(&v)) {
    const int8_t x = *b ? 1 : 0;
    Handle t = bool_type();
    put(t, t, &x);
  } else {
    const char* s = std::get<std::string>(v).c_str();
    Handle t = string_type();
    put(t, t, &s);
  }
}

bool has_attr(hid_t obj, const std::string& name) {
  const htri_t r = H5Aexists(obj, name.c_str());
  if (r < 0) last_error();
  return r > 0;
}

std::vector<std::string> attr_names(hid_t obj) {
  std::vector<std::string> names;
  H5O_info_t info;
  if (H5Oget_info2(obj, &info, H5O_INFO_NUM_ATTRS) < 0) return names;
  for (hsize_t i = 0; i < info.num_attrs; ++i) {
    char buf[512];
    if (H5Aget_name_by_idx(obj, ".", H5_INDEX_NAME, H5_ITER_INC, i, buf, sizeof buf,
                           H5P_DEFAULT) < 0) {
      last_error();
      continue;
    }
    names.emplace_back(buf);
  }
  return names;
}

Value read_attr(hid_t obj, const std::string& name, const std::string& where) {
  Handle a = open_attr(obj, name, where);
  Handle t(H5Aget_type(a), H5Tclose);
  switch (H5Tget_class(t)) {
    case H5T_INTEGER: {
      int64_t x = 0;
      check(H5Aread(a, H5T_NATIVE_INT64, &x), cat(where, ": cannot read attribute '", name, "'"));
      return x;
    }
    case H5T_FLOAT: {
      double x = 0;
      check(H5Aread(a, H5T_NATIVE_DOUBLE, &x), cat(where, ": cannot read attribute '", name, "'"));
      return x;
    }
    case H5T_ENUM: {
      int8_t x = 0;
      Handle bt = bool_type();
      check(H5Aread(a, bt, &x), cat(where, ": attribute '", name, "' is an enum, not a bool"));
      return x != 0;
    }
    case H5T_STRING: {
      if (H5Tis_variable_str(t) > 0) {
        char* s = nullptr;
        Handle mt = string_type();
        check(H5Aread(a, mt, &s), cat(where, ": cannot read attribute '", name, "'"));
        std::string out = s ? s : "";
        H5free_memory(s);
        return out;
      }
      std::string out(H5Tget_size(t), '\0');
      check(H5Aread(a, t, out.data()), cat(where, ": cannot read attribute '", name, "'"));
      out.resize(std::strlen(out.c_str()));
      return out;
    }
    default:
      fail(where, ": attribute '", name, "' has a type lctrain does not read");
  }
}

int64_t read_int(hid_t obj, const std::string& name, const std::string& where) {
  const Value v = read_attr(obj, name, where);
  if (auto* i = std::get_if<int64_t>(&v)) return *i;
  fail(where, ": attribute '", name, "' must be an integer, found ", to_string(v));
}

double read_double(hid_t obj, const std::string& name, const std::string& where) {
  const Value v = read_attr(obj, name, where);
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* i = std::get_if<int64_t>(&v)) return double(*i);
  fail(where, ": attribute '", name, "' must be a number, found '", to_string(v), "'");
}

bool read_bool(hid_t obj, const std::string& name, const std::string& where) {
  const Value v = read_attr(obj, name, where);
  if (auto* b = std::get_if<bool>(&v)) return *b;
  if (auto* i = std::get_if<int64_t>(&v); i && (*i == 0 || *i == 1)) return *i == 1;
  fail(where, ": attribute '", name, "' must be a bool, found '", to_string(v), "'");
}

std::string read_string(hid_t obj, const std::string& name, const std::string& where) {
  const Value v = read_attr(obj, name, where);
  if (auto* s = std::get_if<std::string>(&v)) return *s;
  fail(where, ": attribute '", name, "' must be a string, found ", to_string(v));
}

namespace {
// Parallel files allocate space at creation: never write fill values first.
Handle create_dataset(const File& f, hid_t loc, const std::string& name, hid_t type, hid_t space,
                      hid_t dcpl) {
  Handle own;
  if (dcpl == H5P_DEFAULT) {
    own = Handle(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    dcpl = own;
  }
  H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
  Handle d(H5Dcreate2(loc, name.c_str(), type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose);
  const bool ok = d.valid();
  agree(f, ok, ok ? "" : with_reason(cat(where(f, name), ": cannot create dataset (disk full or I/O error?)")));
  return d;
}

// An array dataset: chunked, checksummed (none when empty).
Handle create_array(const File& f, hid_t loc, const std::string& name, hid_t type,
                    const std::vector<int64_t>& shape) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Handle space(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  int64_t numel = 1;
  for (auto s : shape) numel *= s;
  if (numel > 0) {
    // Chunks of about 1M elements (4 MB): rows of the leading dimension for matrices.
    std::vector<hsize_t> chunk(dims);
    const hsize_t inner = numel / std::max<int64_t>(1, shape.empty() ? 1 : shape[0]);
    if (!chunk.empty()) chunk[0] = std::clamp<hsize_t>((1u << 20) / std::max<hsize_t>(1, inner),
                                                       1, dims[0]);
    H5Pset_chunk(dcpl, int(chunk.size()), chunk.data());
    H5Pset_fletcher32(dcpl);
  }
  return create_dataset(f, loc, name, type, space, dcpl);
}
}  // namespace

template <class T>
void write_array(const File& f, hid_t loc, const std::string& name, const T* data,
                 const std::vector<int64_t>& shape) {
  Handle d = create_array(f, loc, name, native_type<T>(), shape);
  int64_t numel = 1;
  for (auto s : shape) numel *= s;
  if (numel == 0) return;
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Handle space(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
  Handle dxpl(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
  if (f.parallel()) {
    // Filtered datasets can only be written collectively: every rank takes part, rank 0
    // alone with a non-empty selection.
    H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
    if (f.rank != 0) H5Sselect_none(space);
  }
  const bool ok = H5Dwrite(d, native_type<T>(), space, space, dxpl, data) >= 0;
  agree(f, ok, ok ? "" : with_reason(cat(where(f, name), ": write failed (disk full or I/O error?)")));
}

namespace {
// Why one transfer per block: HDF5 (1.10) maps a selection to chunks block by block only
// when the memory selection has the file selection's shape; a union of blocks against runs
// of a 1-D buffer is mapped element by element, which made a 262 MiB checkpoint take 4-9 s.

// Block b of a 1-D or 2-D array: selected in `file` (the dataset's space), and a memory
// space of the block's own shape over its values. An empty block selects nothing.
Handle select_block(hid_t file, size_t rank, const Block* b) {
  const bool some = b && b->rows > 0 && b->cols > 0;
  const hsize_t start[2] = {hsize_t(some ? b->row : 0), hsize_t(some ? b->col : 0)};
  const hsize_t count[2] = {hsize_t(some ? b->rows : 1), hsize_t(some ? b->cols : 1)};
  Handle mem(H5Screate_simple(int(rank), count, nullptr), H5Sclose);
  const bool ok = some ? H5Sselect_hyperslab(file, H5S_SELECT_SET, start, nullptr, count, nullptr) >= 0
                       : H5Sselect_none(file) >= 0 && H5Sselect_none(mem) >= 0;
  return ok ? std::move(mem) : Handle();
}

std::vector<const Block*> non_empty(const std::vector<Block>& blocks) {
  std::vector<const Block*> out;
  for (const Block& b : blocks)
    if (b.rows > 0 && b.cols > 0) out.push_back(&b);
  return out;
}
}  // namespace

void write_blocks(const File& f, hid_t loc, const std::string& name,
                  const std::vector<int64_t>& shape, const float* data,
                  const std::vector<Block>& blocks) {
  Handle d = create_array(f, loc, name, H5T_NATIVE_FLOAT, shape);
  int64_t numel = 1;
  for (auto s : shape) numel *= s;
  if (numel == 0) return;
  if (shape.size() > 2) fail(where(f, name), ": write_blocks takes 1-D and 2-D arrays");
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Handle file(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
  const std::vector<const Block*> mine = non_empty(blocks);
  // Every rank makes as many (collective) writes as the rank with the most blocks.
  int64_t writes = int64_t(mine.size());
  if (f.parallel()) MPI_Allreduce(MPI_IN_PLACE, &writes, 1, MPI_INT64_T, MPI_MAX, f.comm);
  Handle dxpl(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
  // Filtered datasets are written collectively: every rank takes part, with what it owns.
  if (f.parallel()) H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
  const float none = 0;
  for (int64_t i = 0; i < writes; ++i) {
    const Block* b = size_t(i) < mine.size() ? mine[size_t(i)] : nullptr;
    Handle mem = select_block(file, dims.size(), b);
    // Agreed before the collective write: a rank that cannot take part must not strand the others in it.
    agree(f, mem.valid(), mem.valid() ? "" : with_reason(cat(where(f, name), ": bad selection of block ", i)));
    const bool ok = H5Dwrite(d, H5T_NATIVE_FLOAT, mem, file, dxpl, b && data ? data + b->at : &none) >= 0;
    agree(f, ok, ok ? "" : with_reason(cat(where(f, name), ": write failed (disk full or I/O error?)")));
  }
}

void read_blocks(const File& f, hid_t loc, const std::string& name,
                 const std::vector<int64_t>& shape, float* data, const std::vector<Block>& blocks) {
  if (shape.size() > 2) fail(where(f, name), ": read_blocks takes 1-D and 2-D arrays");
  const std::vector<const Block*> mine = non_empty(blocks);
  if (mine.empty()) return;  // nothing of this array here
  Handle d(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.valid()) throw Error(with_reason(cat(where(f, name), ": cannot open dataset")));
  Handle file(H5Dget_space(d), H5Sclose);
  for (const Block* b : mine) {
    Handle mem = select_block(file, shape.size(), b);
    if (!mem.valid()) throw Error(with_reason(cat(where(f, name), ": bad selection of a block")));
    if (H5Dread(d, H5T_NATIVE_FLOAT, mem, file, H5P_DEFAULT, data + b->at) < 0)
      throw Error(with_reason(cat(where(f, name), ": read failed: the data is corrupt or ",
                                  "truncated (checksum or I/O error)")));
  }
}

void write_rank_rows(const File& f, hid_t loc, const std::string& name,
                     const std::vector<int64_t>& row) {
  int ranks = 1;
  if (f.parallel()) MPI_Comm_size(f.comm, &ranks);
  const hsize_t dims[2] = {hsize_t(ranks), hsize_t(row.size())};
  Handle space(H5Screate_simple(2, dims, nullptr), H5Sclose);
  Handle d = create_dataset(f, loc, name, H5T_NATIVE_INT64, space, H5P_DEFAULT);
  const hsize_t start[2] = {hsize_t(f.rank), 0}, count[2] = {1, hsize_t(row.size())};
  H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr);
  Handle mem(H5Screate_simple(1, &count[1], nullptr), H5Sclose);
  Handle dxpl(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
  if (f.parallel()) H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
  const bool ok = H5Dwrite(d, H5T_NATIVE_INT64, mem, space, dxpl, row.data()) >= 0;
  agree(f, ok, ok ? "" : with_reason(cat(where(f, name), ": write failed (disk full or I/O error?)")));
}

int64_t ArrayInfo::numel() const {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

ArrayInfo array_info(const File& f, hid_t loc, const std::string& name) {
  if (!exists(loc, name)) fail(where(f, name), ": dataset is missing");
  Handle d(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.valid()) throw Error(with_reason(cat(where(f, name), ": cannot open dataset")));
  Handle space(H5Dget_space(d), H5Sclose);
  Handle t(H5Dget_type(d), H5Tclose);
  ArrayInfo info;
  const int rank = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(size_t(std::max(rank, 0)));
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  info.shape.assign(dims.begin(), dims.end());
  info.type_class = H5Tget_class(t);
  info.type_size = H5Tget_size(t);
  info.is_signed = info.type_class == H5T_INTEGER && H5Tget_sign(t) == H5T_SGN_2;
  info.dtype = dtype_name(info.type_class, info.type_size, info.is_signed);
  return info;
}

template <class T>
void read_array(const File& f, hid_t loc, const std::string& name, T* out) {
  Handle d(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.valid()) throw Error(with_reason(cat(where(f, name), ": cannot open dataset")));
  if (H5Dread(d, native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)
    throw Error(with_reason(cat(where(f, name), ": read failed: the data is corrupt or ",
                                "truncated (checksum or I/O error)")));
}

#define LCT_H5_ARRAY(T)                                                                      \
  template void write_array<T>(const File&, hid_t, const std::string&, const T*,           \
                               const std::vector<int64_t>&);                                 \
  template void read_array<T>(const File&, hid_t, const std::string&, T*);
LCT_H5_ARRAY(float)
LCT_H5_ARRAY(double)
LCT_H5_ARRAY(int32_t)
LCT_H5_ARRAY(int64_t)
LCT_H5_ARRAY(uint64_t)
LCT_H5_ARRAY(uint8_t)
#undef LCT_H5_ARRAY

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += cat(i ? ", " : "", shape[i]);
  return s + "]";
}

namespace {
// "section.key", or "key" for global options.
std::string config_attr_name(const Setting& s) {
  return s.section.empty() ? s.key : s.section + "." + s.key;
}
}  // namespace

void write_provenance(const File& f, const Provenance& p) {
  Handle g = create_group(f, f.h, "provenance");
  write_attr(g, "software", p.software);
  write_attr(g, "version", p.version);
  write_attr(g, "git_revision", p.git_revision);
  write_attr(g, "date", p.date);
  write_attr(g, "host", p.host);
  write_attr(g, "command_line", p.command_line);
  Handle c = create_group(f, g, "config");
  for (const Setting& s : p.config) write_attr(c, config_attr_name(s), s.value);
}

Provenance read_provenance(const File& f) {
  Provenance p;
  if (!exists(f.h, "provenance")) return p;
  Handle g = open_group(f, "provenance");
  const std::string w = where(f, "provenance");
  auto str = [&](const char* name, std::string& out) {
    if (has_attr(g, name)) out = to_string(read_attr(g, name, w));
  };
  str("software", p.software);
  str("version", p.version);
  str("git_revision", p.git_revision);
  str("date", p.date);
  str("host", p.host);
  str("command_line", p.command_line);
  if (exists(g, "config")) {
    Handle c(H5Gopen2(g, "config", H5P_DEFAULT), H5Gclose);
    for (const std::string& name : attr_names(c)) {
      Setting s;
      const size_t dot = name.find('.');
      s.section = dot == std::string::npos ? "" : name.substr(0, dot);
      s.key = dot == std::string::npos ? name : name.substr(dot + 1);
      s.value = read_attr(c, name, w);
      p.config.push_back(std::move(s));
    }
  }
  return p;
}

std::string library_version() {
  unsigned maj = 0, min = 0, rel = 0;
  H5get_libversion(&maj, &min, &rel);
  return cat(maj, ".", min, ".", rel);
}

}  // namespace lct::h5
