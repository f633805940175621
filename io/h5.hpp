// Thin RAII layer over the HDF5 C API. Private to io/: no header outside io/ includes it.
// Every failure becomes an lct::Error that names the file and the object, with HDF5's own
// innermost reason appended (HDF5's automatic stack printing is switched off).
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "common/provenance.hpp"
#include "io/atomic.hpp"

namespace lct::h5 {

// Owns one hid_t and closes it with the matching H5?close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  Handle& operator=(Handle&& o) noexcept {
    reset();
    id_ = std::exchange(o.id_, H5I_INVALID_HID);
    close_ = o.close_;
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t id() const { return id_; }
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }
  hid_t release() { return std::exchange(id_, H5I_INVALID_HID); }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

// HDF5's innermost error description, and clears the stack.
std::string last_error();

// An open file together with its path, for messages.
struct File {
  Handle h;
  std::string path;
  // Set for a file created by every rank of `comm` (parallel HDF5, MPI-IO driver): creating
  // objects is collective, and write_array writes rank 0's data once, collectively.
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  bool parallel() const { return comm != MPI_COMM_NULL; }
  // A new file at `target`'s temporary name (HDF5 1.8+ format: checksummed metadata), with
  // disk blocks for about `data_bytes` of arrays reserved first: a full disk fails here, with
  // the space needed and `what` the file is, before HDF5 has written anything it could fail
  // to flush. close() gives the unused blocks back.
  // `advice`: what a full disk's message tells the user to do.
  static File create(const AtomicTarget& target, double data_bytes, const std::string& what,
                     const std::string& advice = kFileSpaceAdvice);
  // Collective over `comm`: every rank calls it with the same path.
  static File create_parallel(const std::string& path, MPI_Comm comm);
  // Existing file, read-only; `what` names it in messages ("model file").
  static File open_read(const std::string& path, const std::string& what);
  // Flushes and closes; throws on failure. Never retried: HDF5 1.10 crashes closing a file
  // twice after a failed close.
  void close();

  // A file created here and never closed successfully (an error was thrown while writing
  // it) is discarded: emptied on disk (rank 0) so that closing it, which flushes metadata,
  // cannot fail again for lack of space, then closed (collectively for a parallel file),
  // errors ignored. Otherwise HDF5 would keep it open until exit and fail there. The
  // writer's AtomicTarget then deletes the temporary file.
  File() = default;
  File(File&&) = default;
  File& operator=(File&&) = default;
  ~File();
  bool created = false;
  bool reserved = false;  // disk blocks set aside by create(), given back by close()

 private:
  void discard(hid_t id);  // empty on disk (rank 0), then close, errors ignored
};

// Where in a file we are, for messages: "'run/model.h5': dataset 'x'".
std::string where(const File& f, const std::string& object);

bool exists(hid_t loc, const std::string& path);  // a link of that name (no '/' nesting check)
Handle open_group(const File& f, const std::string& name);
Handle create_group(const File& f, hid_t loc, const std::string& name);

// Attributes
void write_attr(hid_t obj, const std::string& name, const Value& v);
bool has_attr(hid_t obj, const std::string& name);
std::vector<std::string> attr_names(hid_t obj);
Value read_attr(hid_t obj, const std::string& name, const std::string& where);
int64_t read_int(hid_t obj, const std::string& name, const std::string& where);
double read_double(hid_t obj, const std::string& name, const std::string& where);
bool read_bool(hid_t obj, const std::string& name, const std::string& where);
std::string read_string(hid_t obj, const std::string& name, const std::string& where);

// Arrays: chunked, fletcher32-checksummed, so a corrupted byte is caught on read. In a
// parallel file only rank 0's `data` is written (a replicated tensor, stored once).
template <class T>
void write_array(const File& f, hid_t loc, const std::string& name, const T* data,
                 const std::vector<int64_t>& shape);
// A rectangle of a 1-D or 2-D array ([n] as [n, 1]: col 0, cols 1) and where its values
// start in the writer's buffer (row-major, `rows` x `cols` of them back to back).
struct Block {
  int64_t row, col, rows, cols;
  size_t at;
};
// The float32 array write_array makes (same chunks and checksums), each rank writing its own
// `blocks` of it from `data`, one collective write per block (a rank with fewer takes part
// with empty selections). Between them the ranks' blocks must cover the array, each entry once.
void write_blocks(const File& f, hid_t loc, const std::string& name,
                  const std::vector<int64_t>& shape, const float* data,
                  const std::vector<Block>& blocks);
// The other way: `blocks` of a float32 1-D or 2-D array (as write_blocks lays them out) into
// `data`, by this rank alone (an independent read; any file, parallel or not). Only the chunks
// the blocks touch are read (and their checksums verified). The caller has checked the shape.
void read_blocks(const File& f, hid_t loc, const std::string& name,
                 const std::vector<int64_t>& shape, float* data, const std::vector<Block>& blocks);
// Parallel file: a [ranks, row.size()] int64 dataset, row r written by rank r.
void write_rank_rows(const File& f, hid_t loc, const std::string& name,
                     const std::vector<int64_t>& row);

// Parallel file: throws on every rank when `ok` is false on any (one rank's failed write
// must not leave the others inside the next collective call). Serial: throws when !ok.
void agree(const File& f, bool ok, const std::string& what);
// Runs `body` (which may do nothing on some ranks) and agrees on whether it threw.
void agree_on(const File& f, const std::function<void()>& body);

struct ArrayInfo {
  std::vector<int64_t> shape;
  H5T_class_t type_class;
  size_t type_size;
  bool is_signed;
  std::string dtype;  // "float32", "int64", ...
  int64_t numel() const;
};
// Throws when missing (naming it).
ArrayInfo array_info(const File& f, hid_t loc, const std::string& name);
// Reads the whole array converted to T; the caller has checked shape and class.
template <class T>
void read_array(const File& f, hid_t loc, const std::string& name, T* out);

std::string shape_str(const std::vector<int64_t>& shape);

// Provenance: a /provenance group with one attribute per field and a config subgroup.
void write_provenance(const File& f, const Provenance& p);
Provenance read_provenance(const File& f);  // empty fields where absent

std::string library_version();  // "1.10.8"

// lctrain's own convention: root attributes `lctrain_file` (kind) and `format_version`.
// Throws with a message that says what the file is when it is not one of `accepted`.
void check_kind(const File& f, const std::string& what, std::initializer_list<const char*> accepted,
                int64_t version);
void write_kind(const File& f, const std::string& kind, int64_t version);

}  // namespace lct::h5
