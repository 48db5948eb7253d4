// Internal: what a "missing input key" message adds: the keys that were given, and for each
// missing key the given one it most likely misspells. Torch-free; python/tdaot/runtime/inputs.py
// (missing_keys_message) is the Python twin for a TensorDict's keys.
#pragma once

#include <string>
#include <vector>

namespace tdaot::detail {

// The Levenshtein distance between `a` and `b` (bytes).
size_t edit_distance(const std::string& a, const std::string& b);

// The key of `given` closest to `wanted` (a misspelling within a third of its length, at least
// 2 edits, or one a prefix or suffix of the other), or empty.
std::string closest_key(const std::string& wanted, const std::vector<std::string>& given);

// "missing input key(s) 'a', 'b' (given: 'x', 'y'; did you mean 'a' for 'x'?)"; `given` are
// the keys passed that the package does not list (none: "(given: none of them)" is left out).
std::string missing_keys_text(const std::vector<std::string>& missing,
                              const std::vector<std::string>& given);

}  // namespace tdaot::detail
