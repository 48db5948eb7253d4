// Internal: JSON from outside (an inputs file, a weight file's header) parsed with a bound on its
// nesting, so that no document can exhaust the stack of the code that walks it.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>

namespace tdaot::detail {

// JSON nested deeper than a parse allows (its message says how deep, and where).
class JsonDepthError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// `text` parsed as JSON after a scan that refuses nesting deeper than `max_depth` arrays and
// objects (JsonDepthError). Anything else wrong is nlohmann's json::exception, as from
// json::parse: parse_error, or out_of_range for a number beyond double's range (1e400).
nlohmann::json parse_json_limited(std::string_view text, size_t max_depth);

}  // namespace tdaot::detail
