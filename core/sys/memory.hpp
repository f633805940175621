// Big buffers: 64-byte aligned (or more), allocated once, and first touched by the OpenMP threads that
// will work on them (static schedule), so pages land on those threads' NUMA nodes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>

namespace lct {

template <class T>
class Buffer {
 public:
  Buffer() = default;
  // align: a power of two >= 64 (4096 for buffers that direct I/O reads and writes)
  explicit Buffer(size_t n, size_t align = 64) : n_(n) {
    if (n == 0) return;
    const size_t bytes = (n * sizeof(T) + align - 1) / align * align;
    p_ = static_cast<T*>(std::aligned_alloc(align, bytes));
    if (!p_) throw std::bad_alloc();
    const int64_t m = int64_t(n);
    T* p = p_;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < m; ++i) p[i] = T{};
  }
  ~Buffer() { std::free(p_); }
  Buffer(Buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace lct

namespace lct {
double peak_rss_mib();  // the process's high-water resident set, MiB
double resident_bytes();  // the process's resident set now
// Once, first thing in main: keeps glibc from handing the pages of freed mid-size buffers
// back to the kernel (see memory.cpp). Leaves a user's own malloc settings alone.
void tune_allocator();
}  // namespace lct

namespace lct {
// Memory this process may still use: the node's MemAvailable, or less where a cgroup limit
// applies (Slurm --mem, a container): the tightest of (limit - usage) over the process's
// memory cgroup and its ancestors, v1 or v2. bytes = 0 when unknown.
struct MemoryBudget {
  double bytes = 0;
  std::string source;  // "MemAvailable" or "cgroup /slurm/uid_0/job_12 limit 4.00 GiB"
};
// `root` prefixes every file read (/proc/self/mountinfo, /proc/self/cgroup, /proc/meminfo and
// the cgroup files): a test points it at a fake tree.
MemoryBudget available_memory(const std::string& root = "");
}  // namespace lct
