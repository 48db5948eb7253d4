// Counts every malloc-family call in the process (malloc, calloc, realloc, free, posix_memalign,
// aligned_alloc, memalign, valloc, pvalloc), from any thread and any library: operator new,
// torch's CPU allocator and a compiled model's own buffers all end in these. Linked into a test
// executable, whose definitions interpose glibc's for the whole process (dlopen-ed libraries
// included). Left out under AddressSanitizer, which owns malloc itself.
#pragma once

#include <cstdint>

namespace tdaot::test {

// Whether this executable counts (false under a sanitizer).
bool malloc_counting();
// Allocating calls (everything but free) so far, in every thread.
uint64_t malloc_calls();
// free calls with a non-null pointer so far, in every thread.
uint64_t free_calls();

}  // namespace tdaot::test
