// Internal: error text from torch or a compiled model made one message: the C++ stack frames
// c10::Error appends ("Exception raised from ... frame #0: ...") cut off, unless the environment
// asks for them (TDAOT_BACKTRACE=1, docs/errors.md), and trailing blank space trimmed.
#pragma once

#include <string>

namespace tdaot::detail {

// Whether TDAOT_BACKTRACE=1 is set: C++ stack frames are kept in messages.
bool backtraces_wanted();

// `text` without the stack frames c10 appends (unless backtraces_wanted()), trimmed.
std::string without_backtrace(std::string text);

}  // namespace tdaot::detail
