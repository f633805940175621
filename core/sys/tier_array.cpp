#include "sys/tier_array.hpp"

#include <fcntl.h>
#include <numa.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.hpp"

namespace lct {

namespace {
constexpr size_t kPage = 4096;
size_t page_up(size_t b) { return (b + kPage - 1) / kPage * kPage; }
size_t page_down(size_t b) { return b / kPage * kPage; }
}  // namespace

TierArray::TierArray(const TierSpec& spec, size_t n, const std::string& option)
    : n_(n), bytes_(page_up(n * sizeof(float))) {
  if (n == 0) return;
  if (spec.kind == TierSpec::Kind::Numa) {
    p_ = static_cast<float*>(take_numa_memory(spec, bytes_, option));
    return;
  }
  fd_ = open_tier_file(spec, bytes_, option);  // zeros, its room taken
  void* m = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (m == MAP_FAILED) {
    close(fd_);
    fail(option, " '", spec.dir, "': cannot map ", bytes_ >> 20, " MiB of it (", std::strerror(errno), ")");
  }
  p_ = static_cast<float*>(m);
}

TierArray::~TierArray() {
  if (!p_) return;
  if (fd_ >= 0) {
    munmap(p_, bytes_);
    close(fd_);
  } else {
    numa_free(p_, bytes_);
  }
}

void TierArray::ahead(size_t begin, size_t end) {
  if (fd_ < 0 || begin >= end) return;
  const size_t b = page_down(begin * sizeof(float)), e = std::min(bytes_, page_up(end * sizeof(float)));
  if (b < e) madvise(reinterpret_cast<char*>(p_) + b, e - b, MADV_WILLNEED);
}

void TierArray::done(size_t begin, size_t end) {
  if (fd_ < 0) return;
  const size_t b = page_up(begin * sizeof(float)), e = page_down(end * sizeof(float));  // whole pages only
  if (b >= e) return;
  sync_file_range(fd_, off_t(b), off_t(e - b), SYNC_FILE_RANGE_WRITE);  // starts; returns at once
  drop(pending_b_, pending_e_);
  pending_b_ = b;
  pending_e_ = e;
}

void TierArray::flush() {
  drop(pending_b_, pending_e_);
  pending_b_ = pending_e_ = 0;
}

// Byte range [b, e), written back (waiting for the device), out of this process's page
// tables and out of the page cache.
void TierArray::drop(size_t b, size_t e) {
  if (fd_ < 0 || b >= e) return;
  sync_file_range(fd_, off_t(b), off_t(e - b),
                  SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
  madvise(reinterpret_cast<char*>(p_) + b, e - b, MADV_DONTNEED);
  posix_fadvise(fd_, off_t(b), off_t(e - b), POSIX_FADV_DONTNEED);
}

}  // namespace lct
