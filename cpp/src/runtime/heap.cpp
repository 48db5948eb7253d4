// The process's malloc settings (heap.h).
//
// A dynamic model allocates its intermediates on every call. glibc's malloc hands the free top of
// its heap back to the system once more than its trim threshold is free, and serves a block above
// its mmap threshold with a fresh mapping; both thresholds move with what the process allocated
// before. So in some processes every call faulted its intermediates' pages in again and in others
// none did: the MLP benchmark policy at 4096 rows took 1984 page faults a call and 1.4x the time
// in one process, none in another (benchmarks/README.md, "Page faults of a call").
#include "runtime/heap.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tdaot::detail {
namespace {

#if defined(__GLIBC__)
// Blocks up to glibc's largest dynamic mmap threshold (64-bit) come from the heap: a sliced
// call's intermediates stay well below it (tdaot.builder.tuning's slice budget).
constexpr int kMmapThreshold = 32 << 20;
// Free heap kept at its top before glibc trims it: room for many calls' intermediates.
constexpr int kTrimThreshold = 256 << 20;

bool set_by_environment() {
  if (std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr || std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr) {
    return true;
  }
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return tunables != nullptr && (std::strstr(tunables, "glibc.malloc.trim_threshold") != nullptr ||
                                 std::strstr(tunables, "glibc.malloc.mmap_threshold") != nullptr);
}
#endif

}  // namespace

void keep_freed_memory() {
#if defined(__GLIBC__)
  static std::once_flag once;
  std::call_once(once, [] {
    if (set_by_environment()) return;  // the operator's choice stands
    mallopt(M_MMAP_THRESHOLD, kMmapThreshold);
    mallopt(M_TRIM_THRESHOLD, kTrimThreshold);
  });
#endif
}

}  // namespace tdaot::detail
