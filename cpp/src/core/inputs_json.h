// Internal: the JSON inputs files of tdaot-run run --inputs and tdaot-lite run --inputs, read
// torch-free so that both tools and the fuzz target (tests/fuzz/fuzz_inputs.cpp) share one
// reader. Every refusal is an InputsFileError (a tdaot::Error) naming the file and the key or
// element at fault; nothing else escapes (no nlohmann exception, no unbounded recursion).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tdaot/errors.h"

namespace tdaot::detail {

// How deep an inputs file may nest arrays and objects (a 64-dim tensor, in a list of steps).
inline constexpr size_t kMaxInputsDepth = 66;

class InputsFileError : public Error {
 public:
  using Error::Error;
};

// `text` (the bytes of the inputs file `origin`) as JSON: refused when not JSON, nested deeper
// than kMaxInputsDepth, or holding a number beyond double's range.
nlohmann::json parse_inputs_json(const std::string& text, const std::string& origin);

// The bytes of the inputs file `path` ("-": stdin), refused when it cannot be read or is not a
// regular file or stdin.
std::string read_inputs_text(const std::string& path);

// A rectangular nested array of numbers and bools: its shape (along the first elements) and
// its values in row-major order.
struct NestedValues {
  std::vector<int64_t> shape;
  std::vector<double> values;
};

// `value` (the entry `key` of the file `origin`) as a NestedValues; refused when ragged or
// holding anything but numbers and bools, with the element at fault.
NestedValues nested_values(const nlohmann::json& value, const std::string& key,
                           const std::string& origin);

// tdaot-lite's "__reset__": true/false (all rows) or one bool per row.
struct ResetRequest {
  bool all = false;            // reset every row
  std::vector<bool> rows;      // or these rows (empty: `all` decides)
  bool per_row = false;
};

// `value` (the "__reset__" entry of a step of `origin`) as a ResetRequest; refused, naming
// what was given, when it is neither a bool nor a list of bools.
ResetRequest reset_request(const nlohmann::json& value, const std::string& origin);

}  // namespace tdaot::detail
