// Internal: the flight recorder of a bound run (BindOptions::record, docs/flight-recorder.md):
// the last N steps in a ring allocated when bound, written by the binding's thread without
// allocating or locking, read whole from any thread (a seqlock per slot). Torch-free.
//
// Memory model: every slot word is written and read with 64-bit atomics, so a reader racing the
// writer is no data race in C++'s model (TSan-clean): the writer stores seq (relaxed), the data
// and seq_end (release stores: plain moves on x86-64); a reader loads seq_end and the data
// (acquire), then seq: the slot is whole when both are equal, since a copy holding any word of a
// newer step then sees that step's seq (a seqlock; Boehm, "Can seqlocks get along with
// programming language memory models?", 2012). dump_fd hands the ring to write(2) instead, whose
// copy the kernel makes: the same order, with a fence before seq's load.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/run/flight_layout.h"
#include "tdaot/envelope.h"
#include "tdaot/supervisor.h"

namespace tdaot::detail {

class FlightRecorder {
 public:
  // flags bits (docs/flight-recorder.md).
  static constexpr uint32_t kThrew = 1u << 0;
  static constexpr uint32_t kNonfinite = 1u << 1;
  static constexpr uint32_t kRateLimited = 1u << 2;
  // Weights were being made live while the step ran (swap_weights, rollback_weights): which
  // generation it ran is not known.
  static constexpr uint32_t kWeightsChanging = 1u << 3;

  // Allocates the ring (zeroed: seq 0 marks an unwritten slot) and renders the header.
  // `inputs` and `outputs` stay valid and in place for the recorder's life.
  FlightRecorder(FlightInfo info, std::vector<RecordedBuffer> inputs,
                 std::vector<RecordedBuffer> outputs);

  int64_t capacity() const noexcept { return capacity_; }

  // The writer's calls: the binding's thread, under its busy guard; none allocates.
  // Rows reset since the last step (null: every row).
  void mark_reset(const std::vector<bool>* rows) noexcept;
  // Nanoseconds of the steady clock since bind.
  int64_t now_ns() const noexcept;
  // Opens the next slot: its seq, `start_ns`, the weights generation it runs (`weights`), the
  // resets marked, every input as the step reads it (`buffers` false: zeros, for a step refused
  // because a buffer is no longer where it was bound).
  void begin(int64_t start_ns, uint64_t weights, bool buffers) noexcept;
  // Row `row`'s supervisor state after the step (supervised bindings only).
  void supervisor(int64_t row, const SupervisorState& state) noexcept;
  // Closes the slot: every output (`buffers` false: zeros), the duration, flags, counts; then
  // seq_end.
  void end(int64_t duration_ns, uint32_t flags, const Interventions& counts, bool buffers) noexcept;

  // The readers' calls: any thread, any time.
  // A whole log file's bytes: the header and every slot (a slot being written has seq_end 0).
  std::string snapshot() const;
  // The same to `fd` with write(2) only: async-signal-safe. Returns 0, or the errno of the
  // write that failed (errno itself is left as it was).
  int dump_fd(int fd) const noexcept;
  // The same to a file at `path`, created or truncated; throws tdaot::Error naming it.
  void dump(const std::string& path) const;

 private:
  uint64_t* slot(uint64_t seq) const noexcept;
  void store(uint64_t* slot, size_t offset, const void* data, size_t bytes) noexcept;
  // Each of `buffers` into its field at `offsets`, or zeros there.
  void store_buffers(const std::vector<RecordedBuffer>& buffers, const std::vector<size_t>& offsets,
                     bool copy) noexcept;

  int64_t capacity_;
  int64_t batch_;
  std::vector<RecordedBuffer> inputs_;
  std::vector<RecordedBuffer> outputs_;
  FlightLayout layout_;
  std::chrono::steady_clock::time_point bound_at_;
  std::unique_ptr<uint64_t[]> ring_;   // capacity * step_bytes, 8-aligned
  std::vector<uint8_t> pending_reset_;  // one byte per row, rounded up to 8
  uint64_t seq_ = 0;                    // the last step's (writer only)
  uint64_t* open_ = nullptr;            // the slot begin() opened
};

}  // namespace tdaot::detail
