#include "common/progress_mark.hpp"

#include <atomic>

namespace lct {

namespace {
std::atomic<ProgressListener> g_listener{nullptr};
}  // namespace

void set_progress_listener(ProgressListener listener) { g_listener.store(listener, std::memory_order_release); }

void progress_mark(const char* what, int64_t done, int64_t total) {
  if (const ProgressListener l = g_listener.load(std::memory_order_relaxed)) l(what, done, total);
}

}  // namespace lct
