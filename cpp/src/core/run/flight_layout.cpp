// The slot layout and the header of a flight log (flight_layout.h, docs/flight-recorder.md).
#include "core/run/flight_layout.h"

#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "tdaot/errors.h"
#include "tdaot/manifest.h"

namespace tdaot::detail {
namespace {

using Json = nlohmann::ordered_json;

constexpr size_t round8(size_t n) { return (n + 7) / 8 * 8; }

Json scalar(const char* name, size_t offset, const char* dtype) {
  return Json{{"name", name}, {"offset", offset}, {"dtype", dtype}, {"shape", Json::array()}};
}

Json buffer_field(const RecordedBuffer& b, const char* kind, size_t offset) {
  return Json{{"name", std::string(kind) + "s/" + b.key}, {"key", b.key}, {"kind", kind},
              {"offset", offset}, {"dtype", dtype_name(b.dtype)}, {"shape", b.shape}};
}

// The header's JSON for a given data_offset (which it states, so its length depends on it).
// The manifest goes in as the package's own bytes, spliced where the placeholder is.
std::string render(const FlightInfo& info, const Json& fields, size_t step_bytes, size_t data_offset) {
  Json header{{"format", "tdaot-flightlog/1"},
              {"package", {{"path", info.package_path}, {"sha256", info.sha256}, {"manifest", nullptr}}},
              {"runtime", info.runtime},
              {"model", info.model},
              {"batch", info.batch},
              {"capacity", info.capacity},
              {"envelope", info.envelope},
              {"supervised", info.supervised},
              {"supervisor", info.supervisor_json.empty() ? Json() : Json::parse(info.supervisor_json)},
              {"weights", {{"sha256", info.weights_sha256}, {"generation", info.weights_generation}}},
              {"bound_at_unix_ns", info.bound_at_unix_ns},
              {"data_offset", data_offset},
              {"step_bytes", step_bytes},
              {"fields", fields}};
  std::string text = header.dump();
  const std::string placeholder = "\"manifest\":null";
  text.replace(text.find(placeholder), placeholder.size(), "\"manifest\":" + info.manifest_json);
  return text;
}

}  // namespace

FlightLayout flight_layout(const FlightInfo& info, const std::vector<RecordedBuffer>& inputs,
                           const std::vector<RecordedBuffer>& outputs) {
  FlightLayout layout;
  const auto rows = static_cast<size_t>(info.batch);
  Json fields = Json::array();
  fields.push_back(scalar("seq", FlightLayout::kSeq, "uint64"));
  fields.push_back(scalar("start_ns", FlightLayout::kStart, "int64"));
  fields.push_back(scalar("duration_ns", FlightLayout::kDuration, "int64"));
  fields.push_back(scalar("flags", FlightLayout::kFlags, "uint32"));
  fields.push_back(Json{{"name", "interventions"}, {"offset", FlightLayout::kInterventions},
                        {"dtype", "int64"}, {"shape", Json::array({5})},
                        {"elements", Json::array({"nonfinite", "rate_limited", "blended", "clipped", "fallback"})}});
  fields.push_back(Json{{"name", "reset"}, {"offset", FlightLayout::kReset}, {"dtype", "uint8"},
                        {"shape", Json::array({info.batch})}});
  size_t at = FlightLayout::kReset + round8(rows);
  layout.weights = at;
  fields.push_back(scalar("weights_generation", at, "uint64"));
  at += 8;
  if (info.supervised) {
    layout.supervisor = at;
    fields.push_back(Json{{"name", "supervisor"}, {"offset", at}, {"dtype", "record"},
                          {"shape", Json::array({info.batch})},
                          {"elements", Json::array({"mode:int32", "pad:int32", "gain_scale:float64",
                                                     "damping_scale:float64", "blend:float64", "steps:int64"})}});
    at += rows * FlightLayout::kSupervisorRowBytes;
  }
  for (const RecordedBuffer& b : inputs) {
    layout.inputs.push_back(at);
    fields.push_back(buffer_field(b, "input", at));
    at += round8(b.bytes);
  }
  for (const RecordedBuffer& b : outputs) {
    layout.outputs.push_back(at);
    fields.push_back(buffer_field(b, "output", at));
    at += round8(b.bytes);
  }
  layout.seq_end = at;
  fields.push_back(scalar("seq_end", at, "uint64"));
  layout.step_bytes = at + 8;
  const auto capacity = static_cast<size_t>(info.capacity);
  if (capacity > std::numeric_limits<size_t>::max() / 2 / layout.step_bytes) {
    throw InvalidArgumentError("BindOptions::record = " + std::to_string(info.capacity) +
                               " steps of " + std::to_string(layout.step_bytes) +
                               " bytes each is more memory than can be addressed");
  }

  // data_offset = 16 + the padded JSON, a multiple of 8: grown until the JSON stating it fits.
  size_t data_offset = 16;
  std::string json = render(info, fields, layout.step_bytes, data_offset);
  while (16 + json.size() > data_offset) {
    data_offset = round8(16 + json.size());
    json = render(info, fields, layout.step_bytes, data_offset);
  }
  const size_t header_bytes = data_offset - 16;
  if (header_bytes > std::numeric_limits<uint32_t>::max()) {
    throw InvalidArgumentError("the flight log's header would be " + std::to_string(header_bytes) +
                               " bytes, more than its 32-bit size field holds");
  }
  json.resize(header_bytes, ' ');
  layout.header.assign("TDAOTFL1", 8);
  const uint32_t sizes[2] = {static_cast<uint32_t>(header_bytes), 0};  // little-endian hosts
  layout.header.append(reinterpret_cast<const char*>(sizes), sizeof sizes);
  layout.header += json;
  return layout;
}

}  // namespace tdaot::detail
