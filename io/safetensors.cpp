#include "io/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/bf16.hpp"
#include "common/error.hpp"

namespace lct {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian: this reader copies it as is");

namespace {

using json = nlohmann::ordered_json;

constexpr uint64_t kMaxHeader = 100u << 20;  // the format's own limit (100 MB)

int64_t dtype_size(const std::string& d) {
  if (d == "F32") return 4;
  if (d == "BF16" || d == "F16") return 2;
  return 0;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);  // inf, NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while (!(man & 0x400u));
    bits = sign | (uint32_t(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void pread_all(int fd, void* out, uint64_t n, uint64_t at, const std::string& path,
               const std::string& what) {
  char* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, size_t(std::min<uint64_t>(n, 1u << 30)), off_t(at));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail("'", path, "': could not read ", what, ": ", std::strerror(errno));
    if (got == 0)
      fail("'", path, "': ", what, " ends early: the file is truncated; copy or download it again");
    p += got;
    n -= uint64_t(got);
    at += uint64_t(got);
  }
}

// The format (and its reference loader) requires the tensors' offsets to tile the data: in
// offset order each begins where the one before ends, and the last ends at the end of the
// file. Overlaps would read two tensors from the same bytes; gaps hide bytes no tensor owns.
void check_tiling(const StFile& f, uint64_t data_start, const char* advice) {
  std::vector<const StTensor*> order;
  for (const StTensor& t : f.tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const StTensor* a, const StTensor* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  auto range = [&](const StTensor* t) { return cat("'", t->name, "' [", t->begin - data_start, ", ", t->end - data_start, "]"); };
  const std::string rule = "the format requires offsets that tile the data (each byte in exactly one tensor)";
  uint64_t at = data_start;
  const StTensor* prev = nullptr;
  for (const StTensor* t : order) {
    if (t->begin < at)
      fail("'", f.path, "': tensors ", range(prev), " and ", range(t), " overlap; ", rule, ": ", advice);
    if (t->begin > at)
      fail("'", f.path, "': data bytes [", at - data_start, ", ", t->begin - data_start, ") belong to no tensor",
           prev ? cat(" (between ", range(prev), " and ", range(t), ")") : std::string(), "; ", rule, ": ", advice);
    at = t->end;
    prev = t;
  }
  if (at != f.size)
    fail("'", f.path, "': the last ", f.size - at, " data bytes belong to no tensor; ", rule, ": ", advice);
}

}  // namespace

int64_t StTensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

const StTensor* StFile::find(const std::string& name) const {
  for (const StTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

StFile read_safetensors_header(const std::string& path) {
  StFile f;
  f.path = path;
  Fd fd{::open(path.c_str(), O_RDONLY)};
  if (fd.fd < 0) fail("'", path, "' cannot be opened: ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd.fd, &st) != 0 || !S_ISREG(st.st_mode))
    fail("'", path, "' is not a regular file; give a safetensors file");
  f.size = uint64_t(st.st_size);
  const char* advice = "the file is truncated or is not a safetensors file; copy or download it again";
  if (f.size < 8) fail("'", path, "' holds ", f.size, " bytes, too few for a safetensors header: ", advice);
  unsigned char len8[8];
  pread_all(fd.fd, len8, 8, 0, path, "the header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len8[i];
  if (n > kMaxHeader || n > f.size - 8)
    fail("'", path, "': the safetensors header says it is ", n, " bytes long but the file holds ",
         f.size, " bytes", n > kMaxHeader ? " (the format allows at most 100 MB)" : "", ": ", advice);
  std::string text(size_t(n), '\0');
  pread_all(fd.fd, text.data(), n, 8, path, "the header");
  json h;
  try {
    h = json::parse(text);
  } catch (const json::exception& e) {
    fail("'", path, "': the safetensors header is not valid JSON (", e.what(), "): ", advice);
  }
  if (!h.is_object()) fail("'", path, "': the safetensors header is not a JSON object: ", advice);
  const uint64_t data_start = 8 + n, data_bytes = f.size - data_start;
  for (const auto& [name, v] : h.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) fail("'", path, "': __metadata__ is not an object of strings: ", advice);
      for (const auto& [k, s] : v.items())
        if (s.is_string()) f.metadata[k] = s.get<std::string>();
      continue;
    }
    const std::string where = cat("'", path, "': tensor '", name, "'");
    if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() || !v.contains("shape") ||
        !v["shape"].is_array() || !v.contains("data_offsets") || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2)
      fail(where, ": its header entry lacks dtype, shape or data_offsets [begin, end]: ", advice);
    StTensor t;
    t.name = name;
    t.dtype = v["dtype"].get<std::string>();
    const int64_t esize = dtype_size(t.dtype);
    if (esize == 0)
      fail(where, " has dtype ", t.dtype, "; lctrain converts F32, BF16 and F16 tensors: save the ",
           "checkpoint in one of those (e.g. model.to(torch.float32).save_pretrained(DIR))");
    for (const auto& s : v["shape"]) {
      if (!s.is_number_unsigned() || s.get<uint64_t>() > (uint64_t(1) << 40))
        fail(where, ": shape ", v["shape"].dump(), " is not a list of sizes: ", advice);
      t.shape.push_back(s.get<int64_t>());
    }
    for (const auto& o : v["data_offsets"])
      if (!o.is_number_unsigned()) fail(where, ": data_offsets ", v["data_offsets"].dump(), " are not byte offsets: ", advice);
    const uint64_t b = v["data_offsets"][0].get<uint64_t>(), e = v["data_offsets"][1].get<uint64_t>();
    if (b > e || e > data_bytes)
      fail(where, ": data_offsets [", b, ", ", e, "] lie outside the file's ", data_bytes,
           " bytes of data: ", advice);
    if (e - b != uint64_t(t.numel() * esize))
      fail(where, " holds ", e - b, " bytes but shape ", v["shape"].dump(), " of ", t.dtype, " needs ",
           t.numel() * esize, ": ", advice);
    t.begin = data_start + b;
    t.end = data_start + e;
    f.tensors.push_back(std::move(t));
  }
  check_tiling(f, data_start, advice);
  return f;
}

void read_safetensors_tensor(const StFile& file, const StTensor& t, float* out) {
  Fd fd{::open(file.path.c_str(), O_RDONLY)};
  if (fd.fd < 0) fail("'", file.path, "' cannot be opened: ", std::strerror(errno));
  const std::string what = cat("tensor '", t.name, "'");
  const int64_t n = t.numel();
  if (t.dtype == "F32") {
    pread_all(fd.fd, out, uint64_t(n) * 4, t.begin, file.path, what);
    return;
  }
  std::vector<uint16_t> h(static_cast<size_t>(n));
  pread_all(fd.fd, h.data(), uint64_t(n) * 2, t.begin, file.path, what);
  if (t.dtype == "BF16") {
    for (int64_t i = 0; i < n; ++i) out[i] = to_f32(bf16{h[size_t(i)]});
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = half_to_float(h[size_t(i)]);
  }
}

double safetensors_data_bytes(const std::vector<StOutTensor>& tensors, bool bf16) {
  double bytes = 0;
  for (const StOutTensor& t : tensors) {
    double n = 1;
    for (int64_t s : t.shape) n *= double(s);
    bytes += n * (bf16 ? 2 : 4);
  }
  return bytes;
}

void write_safetensors(const std::string& path, const std::string& shown,
                       const std::vector<StOutTensor>& tensors, bool bf16,
                       const std::map<std::string, std::string>& metadata) {
  json h = json::object();
  json meta = json::object();
  for (const auto& [k, v] : metadata) meta[k] = v;
  h["__metadata__"] = meta;
  uint64_t at = 0;
  for (const StOutTensor& t : tensors) {
    uint64_t n = 1;
    for (int64_t s : t.shape) n *= uint64_t(s);
    const uint64_t bytes = n * (bf16 ? 2 : 4);
    h[t.name] = {{"dtype", bf16 ? "BF16" : "F32"}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data 8-byte aligned, as Hugging Face writes it
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) fail("'", shown, "' cannot be created: ", std::strerror(errno));
  bool good = true;
  auto put = [&](const void* p, size_t bytes) { good = good && std::fwrite(p, 1, bytes, f) == bytes; };
  unsigned char len8[8];
  for (int i = 0; i < 8; ++i) len8[i] = uint8_t(uint64_t(text.size()) >> (8 * i));
  put(len8, 8);
  put(text.data(), text.size());
  std::vector<uint16_t> half;
  for (const StOutTensor& t : tensors) {
    size_t n = 1;
    for (int64_t s : t.shape) n *= size_t(s);
    if (!bf16) {
      put(t.data, n * 4);
      continue;
    }
    half.resize(n);
    for (size_t i = 0; i < n; ++i) half[i] = to_bf16(t.data[i]).bits;
    put(half.data(), n * 2);
  }
  const int err = errno;
  if (std::fclose(f) != 0 || !good)
    fail("'", shown, "': writing failed (", std::strerror(good ? errno : err),
         "); free some space, or write the directory elsewhere");
}

}  // namespace lct
