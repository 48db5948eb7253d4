// Internal: refuses concurrent use of an object that is documented as single-threaded.
#pragma once

#include <atomic>

#include "tdaot/errors.h"

namespace tdaot::detail {

// Marks `busy` for the guard's lifetime; throws tdaot::Error with `message` when it already is,
// so a second concurrent call fails loudly instead of racing. One atomic exchange per call.
class BusyGuard {
 public:
  BusyGuard(std::atomic<bool>& busy, const char* message) : busy_(busy) {
    if (busy_.exchange(true, std::memory_order_acquire)) throw InvalidArgumentError(message);
  }
  ~BusyGuard() { busy_.store(false, std::memory_order_release); }
  BusyGuard(const BusyGuard&) = delete;
  BusyGuard& operator=(const BusyGuard&) = delete;

 private:
  std::atomic<bool>& busy_;
};

}  // namespace tdaot::detail
