#include "sys/tier_store.hpp"

#include <fcntl.h>
#include <numa.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/error.hpp"
#include "sys/memory.hpp"

namespace lct {

namespace {

std::string gib(double bytes) { return cat(int64_t(bytes / (1 << 20)) / 1024.0, " GiB"); }

double free_bytes(const std::string& dir) {
  struct statvfs s{};
  return statvfs(dir.c_str(), &s) == 0 ? double(s.f_bavail) * double(s.f_frsize) : -1.0;
}

}  // namespace

TierSpec TierSpec::parse(const std::string& text, const std::string& option) {
  TierSpec t;
  if (text.empty() || text == "none") return t;
  if (text.rfind("numa:", 0) == 0) {
    const std::string n = text.substr(5);
    char* end = nullptr;
    const long node = n.empty() ? -1 : std::strtol(n.c_str(), &end, 10);
    if (node < 0 || (end && *end != '\0'))
      fail(option, " '", text, "': numa:N takes a NUMA node number (numa:1, say); `numactl -H` lists them");
    if (numa_available() < 0) fail(option, " '", text, "': this system has no NUMA support; give a directory instead");
    if (node > numa_max_node())
      fail(option, " numa:", node, ": this machine's NUMA nodes are 0-", numa_max_node(), " (`numactl -H`)");
    t.kind = Kind::Numa;
    t.node = int(node);
    return t;
  }
  struct stat st{};
  if (stat(text.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    fail(option, " '", text, "' is not a directory: give an existing directory on a local disk ",
         "(node-local scratch or NVMe, not a network file system), or numa:N for a NUMA node's memory");
  if (access(text.c_str(), W_OK | X_OK) != 0)
    fail(option, " '", text, "': this process cannot write there (", std::strerror(errno),
         "); choose a directory it owns, e.g. the job's local scratch");
  t.kind = Kind::Disk;
  t.dir = text;
  return t;
}

std::string TierSpec::describe() const {
  switch (kind) {
    case Kind::Disk: return "disk " + dir;
    case Kind::Numa: return cat("NUMA node ", node);
    default: return "none";
  }
}

TierStore::TierStore(const TierSpec& spec, size_t block_bytes, int64_t blocks, const std::string& option)
    : option_(option), where_(spec.describe()), block_bytes_(block_bytes), blocks_(blocks) {
  if (spec.kind == TierSpec::Kind::Disk) {
    fd_ = open_tier_file(spec, bytes(), option_, &direct_);
  } else if (spec.kind == TierSpec::Kind::Numa) {  // (parse() checked the node)
    numa_ = static_cast<char*>(take_numa_memory(spec, bytes(), option_));
  } else {
    fail(option_, ": no tier given");
  }
  thread_ = std::thread([this] { run(); });
}

void* take_numa_memory(const TierSpec& spec, size_t bytes, const std::string& option) {
  void* p = numa_alloc_onnode(bytes, spec.node);
  if (!p) fail(option, " numa:", spec.node, ": could not take ", gib(double(bytes)), " there");
  std::memset(p, 0, bytes);
  return p;
}

// A file with no name (O_TMPFILE), or one unlinked at once where the file system has no
// O_TMPFILE: private to this process and gone when it exits, however it exits.
int open_tier_file(const TierSpec& spec, size_t bytes, const std::string& option, bool* direct) {
  int fd = direct ? open(spec.dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC | O_DIRECT, 0600) : -1;
  if (direct) *direct = fd >= 0;
  if (fd < 0) fd = open(spec.dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);  // (tmpfs: no O_DIRECT)
  if (fd < 0) {
    std::string name = spec.dir + "/lctrain-tier-XXXXXX";
    fd = mkostemp(name.data(), O_CLOEXEC);
    if (fd < 0) fail(option, " '", spec.dir, "': cannot make a file there (", std::strerror(errno), ")");
    unlink(name.c_str());
  }
  if (const int e = posix_fallocate(fd, 0, off_t(bytes)); e != 0) {
    close(fd);
    const double free = free_bytes(spec.dir);
    fail(option, " '", spec.dir, "': needs ", gib(double(bytes)), " there",
         free >= 0 ? cat(" and its file system has ", gib(free), " free") : std::string(), " (",
         std::strerror(e), "); free space there, choose another directory, or offload less");
  }
  return fd;
}

TierStore::~TierStore() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) close(fd_);
  if (numa_) numa_free(numa_, bytes());
}

TierStore::Ticket TierStore::queue(Job j) {
  if (j.block < 0 || j.block >= blocks_ || j.bytes > block_bytes_)
    fail("tier: block ", j.block, " of ", j.bytes, " bytes outside ", blocks_, " blocks of ", block_bytes_);
  Ticket t;
  {
    std::lock_guard<std::mutex> g(mu_);
    t = j.ticket = ++issued_;
    jobs_.push_back(j);
  }
  wake_.notify_one();
  return t;
}

TierStore::Ticket TierStore::save(int64_t block, const void* src, size_t bytes) {
  return queue({0, true, block, const_cast<char*>(static_cast<const char*>(src)), bytes});
}

TierStore::Ticket TierStore::load(int64_t block, void* dst, size_t bytes) {
  return queue({0, false, block, static_cast<char*>(dst), bytes});
}

void TierStore::wait(Ticket t) {
  std::unique_lock<std::mutex> g(mu_);
  done_.wait(g, [&] { return completed_ >= t || !error_.empty(); });
  if (!error_.empty()) fail(error_);
}

void TierStore::run() {
  for (;;) {
    Job j;
    {
      std::unique_lock<std::mutex> g(mu_);
      wake_.wait(g, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stop_, nothing left
      j = jobs_.front();
      jobs_.pop_front();
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::string err;
    try {
      if (error_.empty()) copy(j);
    } catch (const Error& e) {
      err = e.what();
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!err.empty() && error_.empty()) error_ = err;
      completed_ = j.ticket;
      moved_ += j.bytes;
      busy_s_ += s;
    }
    done_.notify_all();
  }
}

// One block each way. On disk, by direct I/O where the file system and the block's alignment
// allow; otherwise the written range is pushed to the device and dropped from the page cache,
// and so is a range once read: the tier's bytes must not stay in this node's memory as
// cache, which is what offloading them is for.
void TierStore::copy(const Job& j) {
  const size_t at = size_t(j.block) * block_bytes_;
  if (numa_) {
    if (j.save) std::memcpy(numa_ + at, j.mem, j.bytes);
    else std::memcpy(j.mem, numa_ + at, j.bytes);
    return;
  }
  const bool aligned = (uintptr_t(j.mem) | j.bytes | at) % kAlign == 0;
  if (direct_ && !aligned && fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) & ~O_DIRECT) == 0)
    direct_ = false;  // from now on through the page cache
  for (size_t done = 0; done < j.bytes;) {
    const ssize_t n = j.save ? pwrite(fd_, j.mem + done, j.bytes - done, off_t(at + done))
                             : pread(fd_, j.mem + done, j.bytes - done, off_t(at + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      fail(option_, " (", where_, "): ", j.save ? "writing" : "reading", " ", j.bytes, " bytes failed (",
           n < 0 ? std::strerror(errno) : "end of file", "); check the disk, or offload elsewhere");
    done += size_t(n);
  }
  if (direct_) return;
  if (j.save) sync_file_range(fd_, off_t(at), off_t(j.bytes), SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
  posix_fadvise(fd_, off_t(at), off_t(j.bytes), POSIX_FADV_DONTNEED);
}

TierRates measure_tier(const TierSpec& spec, const std::string& option, size_t block_bytes, int64_t blocks) {
  Buffer<char> mem(block_bytes, TierStore::kAlign);
  std::memset(mem.data(), 1, block_bytes);  // touched: its pages exist before the clock starts
  TierStore store(spec, block_bytes, blocks, option);
  const double bytes = double(block_bytes) * double(blocks);
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  for (int64_t b = 0; b < blocks; ++b) store.wait(store.save(b, mem.data(), block_bytes));
  const auto t1 = clock::now();
  for (int64_t b = 0; b < blocks; ++b) store.wait(store.load(b, mem.data(), block_bytes));
  const auto t2 = clock::now();
  const auto gbs = [bytes](auto d) { return bytes / std::max(1e-9, std::chrono::duration<double>(d).count()) / 1e9; };
  return {gbs(t1 - t0), gbs(t2 - t1)};
}

}  // namespace lct
