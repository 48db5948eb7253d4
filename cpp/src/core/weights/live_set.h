// Internal: one model's constant sets as a weight swap keeps them, for both runtimes' bound
// models (runtime/weights.h, lite/weights.h): the live set, the previous one (for rollback) and a
// generation bumped by every swap or rollback. A model instance records the generation it was
// given and is brought up to date when its next call starts, never during one; in steady state
// that check is one atomic load. `Set` is the runtime's own constant set type.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>

namespace tdaot::detail {

template <typename Set>
class LiveSet {
 public:
  // Makes `set` live, keeping the live one as previous.
  void publish(std::shared_ptr<const Set> set) {
    const std::lock_guard<std::mutex> lock(mutex_);
    previous_ = std::move(live_);
    live_ = std::move(set);
    generation_.fetch_add(1, std::memory_order_release);
  }
  // Exchanges live and previous.
  void exchange() {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::swap(live_, previous_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  // Names the set every instance already holds (the constants a model was built with), without
  // a new generation.
  void hold(std::shared_ptr<const Set> set) {
    const std::lock_guard<std::mutex> lock(mutex_);
    live_ = std::move(set);
  }
  // Whether an instance given generation `seen` is behind (one atomic load).
  bool behind(uint64_t seen) const { return seen != generation_.load(std::memory_order_acquire); }
  // The live set (null: the constants embedded in the library) and its generation.
  std::pair<std::shared_ptr<const Set>, uint64_t> live() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return {live_, generation_.load(std::memory_order_relaxed)};
  }

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const Set> live_;
  std::shared_ptr<const Set> previous_;
  std::atomic<uint64_t> generation_{0};
};

}  // namespace tdaot::detail
