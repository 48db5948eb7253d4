// What the fuzz targets beside fuzz_manifest.cpp share: a failure that aborts (a finding), the
// verbose notes (TDAOT_FUZZ_VERBOSE=1), and the rule that only a tdaot::Error may escape.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <typeinfo>

#include "tdaot/errors.h"

namespace tdaot::fuzz {

[[noreturn]] inline void fail(const char* target, const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", target, what.c_str());
  std::fflush(stderr);
  std::abort();
}

inline bool verbose() {
  static const bool on = [] {
    const char* value = std::getenv("TDAOT_FUZZ_VERBOSE");
    return value != nullptr && std::string(value) == "1";
  }();
  return on;
}

inline void note(const std::string& what) {
  if (verbose()) std::fprintf(stderr, "  %s\n", what.c_str());
}

// Runs `body`: returns normally or on a tdaot::Error (noted); anything else is a finding.
template <typename Body>
void only_tdaot_errors(const char* target, const Body& body) {
  try {
    body();
  } catch (const tdaot::Error& e) {
    note(std::string("refused: ") + e.what());
  } catch (const std::exception& e) {
    fail(target, std::string("threw something other than a tdaot::Error: ") + typeid(e).name() +
                     ": " + e.what());
  }
}

}  // namespace tdaot::fuzz
