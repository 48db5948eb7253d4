// Depth-bounded JSON parsing (json_limits.h).
#include "core/json_limits.h"

#include <string>

namespace tdaot::detail {

nlohmann::json parse_json_limited(std::string_view text, size_t max_depth) {
  size_t depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        throw JsonDepthError("nested deeper than " + std::to_string(max_depth) +
                             " arrays or objects (at byte " + std::to_string(i) + ")");
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return nlohmann::json::parse(text.begin(), text.end());
}

}  // namespace tdaot::detail
