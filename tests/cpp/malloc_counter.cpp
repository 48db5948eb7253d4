// The process-wide malloc-family counter of malloc_counter.h: glibc's allocator, called through
// its __libc_* entry points, with one relaxed atomic increment per call.
#include "malloc_counter.h"

#include <atomic>
#include <cerrno>
#include <cstddef>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TDAOT_COUNT_MALLOC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define TDAOT_COUNT_MALLOC 0
#endif
#endif
#ifndef TDAOT_COUNT_MALLOC
#define TDAOT_COUNT_MALLOC 1
#endif

namespace {
std::atomic<uint64_t> allocations{0};
std::atomic<uint64_t> frees{0};
}  // namespace

namespace tdaot::test {
bool malloc_counting() { return TDAOT_COUNT_MALLOC != 0; }
uint64_t malloc_calls() { return allocations.load(); }
uint64_t free_calls() { return frees.load(); }
}  // namespace tdaot::test

#if TDAOT_COUNT_MALLOC
extern "C" {
// glibc's own allocator under its internal names (what every interposing allocator calls).
void* __libc_malloc(size_t) noexcept;
void* __libc_calloc(size_t, size_t) noexcept;
void* __libc_realloc(void*, size_t) noexcept;
void __libc_free(void*) noexcept;
void* __libc_memalign(size_t, size_t) noexcept;

namespace {
inline void count() { allocations.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

void* malloc(size_t size) noexcept {
  count();
  return __libc_malloc(size);
}
void* calloc(size_t count_, size_t size) noexcept {
  count();
  return __libc_calloc(count_, size);
}
void* realloc(void* p, size_t size) noexcept {
  count();
  return __libc_realloc(p, size);
}
void free(void* p) noexcept {
  if (p != nullptr) frees.fetch_add(1, std::memory_order_relaxed);
  __libc_free(p);
}
void* memalign(size_t alignment, size_t size) noexcept {
  count();
  return __libc_memalign(alignment, size);
}
void* aligned_alloc(size_t alignment, size_t size) noexcept {
  count();
  return __libc_memalign(alignment, size);
}
void* valloc(size_t size) noexcept {
  count();
  return __libc_memalign(4096, size);
}
void* pvalloc(size_t size) noexcept {
  count();
  return __libc_memalign(4096, (size + 4095) & ~size_t{4095});
}
int posix_memalign(void** out, size_t alignment, size_t size) noexcept {
  count();
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
}  // extern "C"
#endif
