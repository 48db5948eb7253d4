// Allocations per call for the tools' bench commands (tdaot-run bench, tdaot-lite bench): when a
// malloc-family counter exporting tdaot_alloc_count() is preloaded
// (benchmarks/cpp/alloc_counter.c: LD_PRELOAD=libtdaot-alloc-counter.so ...), every malloc-family
// call of the process between two points is counted.
#pragma once

#include <dlfcn.h>

#include <cstdint>

namespace tdaot::tool {

// The preloaded counter's tdaot_alloc_count, or null when none is preloaded.
using AllocCount = unsigned long long (*)();
inline AllocCount alloc_counter() {
  return reinterpret_cast<AllocCount>(dlsym(RTLD_DEFAULT, "tdaot_alloc_count"));
}

// Counts allocations between its construction and done(), when a counter is preloaded.
class AllocWindow {
 public:
  AllocWindow() : count_(alloc_counter()), start_(count_ ? count_() : 0) {}
  // Allocations per call over `calls` calls; -1 when no counter is preloaded.
  double done(int64_t calls) const {
    if (count_ == nullptr) return -1;
    return static_cast<double>(count_() - start_) / static_cast<double>(calls);
  }

 private:
  AllocCount count_;
  unsigned long long start_;
};

}  // namespace tdaot::tool
