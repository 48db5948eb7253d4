// libFuzzer target: the JSON inputs files of tdaot-run run --inputs and tdaot-lite run --inputs
// (cpp/src/core/inputs_json.h, the one reader both tools use). An input is the file's bytes.
// Every entry is read as a tensor's nested values, "__reset__" as tdaot-lite's reset, a list
// as tdaot-lite's rollout; anything but a value or an InputsFileError (a tdaot::Error) is a
// finding, as is a NestedValues whose values do not fill its shape.
#include <cstdint>
#include <string>

#include "core/inputs_json.h"
#include "fuzz_support.h"

namespace {

constexpr const char* kTarget = "fuzz_inputs";

void read_step(const nlohmann::json& step) {
  if (!step.is_object()) return;
  for (const auto& [key, value] : step.items()) {
    if (key == "__reset__") {
      const auto reset = tdaot::detail::reset_request(value, "fuzz.json");
      if (reset.per_row && reset.rows.size() != value.size()) {
        tdaot::fuzz::fail(kTarget, "a per-row reset of another length than its list");
      }
      continue;
    }
    const auto nested = tdaot::detail::nested_values(value, key, "fuzz.json");
    uint64_t count = 1;
    for (int64_t size : nested.shape) count *= static_cast<uint64_t>(size);
    if (count != nested.values.size()) {
      tdaot::fuzz::fail(kTarget, "'" + key + "': " + std::to_string(nested.values.size()) +
                                     " values for " + std::to_string(count) + " elements");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tdaot::fuzz::only_tdaot_errors(kTarget, [&] {
    const nlohmann::json root = tdaot::detail::parse_inputs_json(text, "fuzz.json");
    if (root.is_array()) {
      for (const auto& step : root) read_step(step);
    } else {
      read_step(root);
    }
  });
  return 0;
}
