// A minimal reader of flight logs (docs/flight-recorder.md) for the recorder's tests, lite and
// full runtime alike: the header as JSON, the whole slots in seq order, a field's bytes by name.
// Torch-free; it reads what the format page says and nothing else.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace tdaot::test {

struct FlightLog {
  nlohmann::json header;
  std::string bytes;
  std::vector<size_t> whole;  // the whole slots' file offsets, in seq order

  explicit FlightLog(std::string file) : bytes(std::move(file)) {
    if (bytes.size() < 16 || bytes.compare(0, 8, "TDAOTFL1") != 0) throw std::runtime_error("no magic");
    uint32_t header_bytes = 0;
    std::memcpy(&header_bytes, bytes.data() + 8, 4);
    header = nlohmann::json::parse(bytes.substr(16, header_bytes));
    const size_t data_offset = header["data_offset"];
    const size_t step = header["step_bytes"];
    const size_t capacity = header["capacity"];
    if (data_offset != 16 + header_bytes || bytes.size() != data_offset + capacity * step) {
      throw std::runtime_error("the file's size is not data_offset + capacity * step_bytes");
    }
    std::vector<std::pair<uint64_t, size_t>> slots;
    for (size_t s = 0; s < capacity; ++s) {
      const size_t at = data_offset + s * step;
      const uint64_t seq = u64(at, "seq");
      if (seq != 0 && seq == u64(at, "seq_end")) slots.emplace_back(seq, at);
    }
    std::sort(slots.begin(), slots.end());
    for (const auto& slot : slots) whole.push_back(slot.second);
  }

  const nlohmann::json& field(const std::string& name) const {
    for (const nlohmann::json& f : header["fields"]) {
      if (f["name"] == name) return f;
    }
    throw std::runtime_error("no field '" + name + "'");
  }
  size_t offset(const std::string& name) const { return field(name)["offset"].get<size_t>(); }
  // The bytes of field `name` in the slot at file offset `slot`, `size` of them.
  std::string raw(size_t slot, const std::string& name, size_t size) const {
    return bytes.substr(slot + offset(name), size);
  }
  template <typename T>
  T value(size_t slot, const std::string& name, size_t index = 0) const {
    T v;
    std::memcpy(&v, bytes.data() + slot + offset(name) + index * sizeof(T), sizeof v);
    return v;
  }
  uint64_t u64(size_t slot, const std::string& name) const { return value<uint64_t>(slot, name); }
  std::vector<uint64_t> seqs() const {
    std::vector<uint64_t> out;
    for (size_t slot : whole) out.push_back(u64(slot, "seq"));
    return out;
  }
};

}  // namespace tdaot::test
