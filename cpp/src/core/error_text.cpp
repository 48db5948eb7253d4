// Error text without C++ stack frames (error_text.h).
#include "core/error_text.h"

#include <cstdlib>
#include <cstring>

namespace tdaot::detail {

bool backtraces_wanted() {
  const char* value = std::getenv("TDAOT_BACKTRACE");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

std::string without_backtrace(std::string text) {
  if (!backtraces_wanted()) {
    for (const char* marker : {"\nException raised from ", "Exception raised from ", "\nframe #0"}) {
      const size_t at = text.find(marker);
      if (at != std::string::npos) text.erase(at);
    }
  }
  text.erase(text.find_last_not_of(" \n\r\t") + 1);
  return text;
}

}  // namespace tdaot::detail
