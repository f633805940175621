// The safetensors format (Hugging Face): an 8-byte little-endian header length N, N bytes of
// JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}, then
// the raw little-endian tensor data, offsets relative to the byte after the header.
// Reading checks every offset against the file's size before any data is read, and reads
// one tensor's byte range at a time (no whole-file copy).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace lct {

struct StTensor {
  std::string name;
  std::string dtype;            // "F32", "BF16", "F16" (the only ones accepted)
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // absolute byte offsets in the file
  int64_t numel() const;
};

struct StFile {
  std::string path;
  uint64_t size = 0;
  std::vector<StTensor> tensors;  // in file order of their data
  std::map<std::string, std::string> metadata;
  const StTensor* find(const std::string& name) const;
};

// Parses and checks the header; throws lct::Error naming the file (and tensor) otherwise.
StFile read_safetensors_header(const std::string& path);

// Reads one tensor of `file` as float32 into out[numel]: F32 is copied bit for bit, BF16 and
// F16 are widened exactly.
void read_safetensors_tensor(const StFile& file, const StTensor& t, float* out);

struct StOutTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data;  // numel floats
};

// Writes `tensors` (fp32, or rounded to bf16 to nearest even) in the given order to `path`,
// a temporary file the caller renames (io/atomic.hpp); `shown` is the name messages give.
void write_safetensors(const std::string& path, const std::string& shown,
                       const std::vector<StOutTensor>& tensors, bool bf16,
                       const std::map<std::string, std::string>& metadata);

// Bytes write_safetensors will write for these tensors (data only, close to the total).
double safetensors_data_bytes(const std::vector<StOutTensor>& tensors, bool bf16);

}  // namespace lct
