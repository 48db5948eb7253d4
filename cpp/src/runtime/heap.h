// Internal: the process's malloc settings the full runtime relies on.
#pragma once

namespace tdaot::detail {

// Keeps the memory a call frees for the next call (PolicyOptions.keep_freed_memory): with
// glibc, raises its trim threshold and fixes its mmap threshold, once per process, unless the
// environment already sets either. Elsewhere it does nothing.
void keep_freed_memory();

}  // namespace tdaot::detail
