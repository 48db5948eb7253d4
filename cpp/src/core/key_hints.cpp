// Hints for a missing input key (key_hints.h).
#include "core/key_hints.h"

#include <algorithm>

namespace tdaot::detail {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

namespace {

bool affix(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  const std::string& shorter = a.size() < b.size() ? a : b;
  const std::string& longer = a.size() < b.size() ? b : a;
  return longer.compare(0, shorter.size(), shorter) == 0 ||
         longer.compare(longer.size() - shorter.size(), shorter.size(), shorter) == 0;
}

std::string quoted_list(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& key : keys) out += (out.empty() ? "'" : ", '") + key + "'";
  return out;
}

}  // namespace

std::string closest_key(const std::string& wanted, const std::vector<std::string>& given) {
  std::string best;
  size_t best_distance = 0;
  for (const std::string& key : given) {
    // Keys are short; a long one is compared only when the lengths are close.
    const size_t longest = std::max(key.size(), wanted.size());
    const size_t gap = key.size() > wanted.size() ? key.size() - wanted.size() : wanted.size() - key.size();
    const size_t allowed = std::max<size_t>(2, longest / 3);
    size_t distance = gap;
    if (gap <= allowed && longest <= 256) distance = edit_distance(wanted, key);
    const bool close = distance <= allowed || affix(wanted, key);
    if (close && (best.empty() || distance < best_distance)) {
      best = key;
      best_distance = distance;
    }
  }
  return best;
}

std::string missing_keys_text(const std::vector<std::string>& missing,
                              const std::vector<std::string>& given) {
  std::string text = "missing input key(s) " + quoted_list(missing);
  if (given.empty()) return text;
  text += " (given: " + quoted_list(given);
  std::string hints;
  for (const std::string& key : missing) {
    const std::string near = closest_key(key, given);
    if (!near.empty()) hints += (hints.empty() ? "" : ", ") + ("'" + key + "' for '" + near + "'");
  }
  if (!hints.empty()) text += "; did you mean " + hints + "?";
  return text + ")";
}

}  // namespace tdaot::detail
