// Internal: where each field of a flight log's step slot lies, and the file's header, rendered
// once when a binding is bound (docs/flight-recorder.md, "tdaot-flightlog/1"). Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tdaot/dtype.h"

namespace tdaot::detail {

// One bound input or output as the recorder copies it: host memory of `bytes` bytes.
struct RecordedBuffer {
  std::string key;
  DType dtype;
  std::vector<int64_t> shape;  // with the batch
  const void* data;
  size_t bytes;
};

// What the header says about the binding, besides its buffers.
struct FlightInfo {
  std::string package_path;
  std::string sha256;         // of the package file
  std::string manifest_json;  // the package's manifest, as read from it
  std::string runtime;        // "lite" or "full"
  std::string model;
  int64_t batch = 0;
  int64_t capacity = 0;       // slots
  bool envelope = false;
  bool supervised = false;
  // The supervisor the binding runs, as the manifest's "contract.supervisor" JSON ("" none): the
  // contract's or the one given at bind, so a replay rebuilds it either way.
  std::string supervisor_json;
  // The weights live when bound: their digest ("" for a package that records none) and
  // generation (PolicyCore::live_weights); each slot records the generation its step ran.
  std::string weights_sha256;
  uint64_t weights_generation = 0;
  int64_t bound_at_unix_ns = 0;
};

// Byte offsets inside a slot; every field starts at a multiple of 8.
struct FlightLayout {
  static constexpr size_t kSeq = 0;
  static constexpr size_t kStart = 8;
  static constexpr size_t kDuration = 16;
  static constexpr size_t kFlags = 24;
  static constexpr size_t kInterventions = 32;
  static constexpr size_t kReset = 72;
  static constexpr size_t kSupervisorRowBytes = 40;  // mode, pad, gain, damping, blend, steps
  size_t supervisor = 0;             // meaningful when supervised
  size_t weights = 0;                // the step's weights generation (uint64)
  std::vector<size_t> inputs;        // one offset per input, manifest order
  std::vector<size_t> outputs;
  size_t seq_end = 0;
  size_t step_bytes = 0;             // seq_end + 8
  // The file's first data_offset bytes: magic, header_bytes, 0, the JSON padded with spaces.
  std::string header;
};

// The layout of `info`'s slots and its header. Throws InvalidArgumentError when the ring
// (capacity * step_bytes) or the header would not fit the format's sizes.
FlightLayout flight_layout(const FlightInfo& info, const std::vector<RecordedBuffer>& inputs,
                           const std::vector<RecordedBuffer>& outputs);

}  // namespace tdaot::detail
