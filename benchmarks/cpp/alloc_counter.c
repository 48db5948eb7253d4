// libtdaot-alloc-counter.so: counts every malloc-family call in a process, from outside the
// runtimes the bench server times (LD_PRELOAD; benchmarks/run.py sets it). operator new and
// delete reach malloc/free through libstdc++, so they count too. The server reads the count
// through dlsym(RTLD_DEFAULT, "tdaot_alloc_count") and reports allocations per call as the
// difference between N and 2N calls, divided by N.
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>

extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void __libc_free(void*);
extern void* __libc_memalign(size_t, size_t);

static _Atomic unsigned long long allocations;

#define COUNT() atomic_fetch_add_explicit(&allocations, 1, memory_order_relaxed)

__attribute__((visibility("default"))) unsigned long long tdaot_alloc_count(void) { return allocations; }

void* malloc(size_t n) { COUNT(); return __libc_malloc(n); }
void* calloc(size_t count, size_t n) { COUNT(); return __libc_calloc(count, n); }
void* realloc(void* p, size_t n) { COUNT(); return __libc_realloc(p, n); }
void free(void* p) { __libc_free(p); }
void* memalign(size_t alignment, size_t n) { COUNT(); return __libc_memalign(alignment, n); }
void* aligned_alloc(size_t alignment, size_t n) { COUNT(); return __libc_memalign(alignment, n); }
void* valloc(size_t n) { COUNT(); return __libc_memalign(4096, n); }
void* pvalloc(size_t n) { COUNT(); return __libc_memalign(4096, (n + 4095) & ~(size_t)4095); }
int posix_memalign(void** out, size_t alignment, size_t n) {
  COUNT();
  void* p = __libc_memalign(alignment, n);
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}
