// The tools' JSON inputs files (inputs_json.h).
#include "core/inputs_json.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <iterator>

#include "core/json_limits.h"

namespace tdaot::detail {
namespace {

[[noreturn]] void refuse(const std::string& origin, const std::string& problem) {
  throw InputsFileError("inputs file '" + origin + "': " + problem);
}

// `value` as text for a message, at most ~80 characters.
std::string shown(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

}  // namespace

std::string read_inputs_text(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), {});
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) refuse(path, std::string("cannot be read: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    refuse(path, "is not a regular file");
  }
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) refuse(path, std::string("cannot be read: ") + std::strerror(errno));
    if (got == 0) break;
    text.append(buffer, static_cast<size_t>(got));
  }
  return text;
}

nlohmann::json parse_inputs_json(const std::string& text, const std::string& origin) {
  try {
    return parse_json_limited(text, kMaxInputsDepth);
  } catch (const JsonDepthError& e) {
    refuse(origin, std::string("is ") + e.what() + "; inputs nest at most " +
                       std::to_string(kMaxInputsDepth) + " deep");
  } catch (const nlohmann::json::out_of_range& e) {
    refuse(origin, std::string("holds a number out of range (beyond a double): ") + e.what());
  } catch (const nlohmann::json::exception& e) {
    refuse(origin, std::string("invalid JSON: ") + e.what());
  }
}

NestedValues nested_values(const nlohmann::json& value, const std::string& key,
                           const std::string& origin) {
  NestedValues out;
  for (const nlohmann::json* level = &value; level->is_array(); level = &level->front()) {
    out.shape.push_back(static_cast<int64_t>(level->size()));
    if (level->empty()) break;
  }
  // Iterative walk (the depth is bounded by the parse, but no recursion is needed either).
  struct Frame {
    const nlohmann::json* array;
    size_t next;
  };
  std::vector<Frame> stack;
  std::vector<size_t> index;
  const auto where = [&]() {
    std::string text = "'" + key + "'";
    for (size_t i : index) text += "[" + std::to_string(i) + "]";
    return text;
  };
  const auto visit = [&](const nlohmann::json& item) {
    const size_t depth = stack.size();
    if (depth == out.shape.size()) {
      if (item.is_boolean()) {
        out.values.push_back(item.get<bool>() ? 1.0 : 0.0);
      } else if (item.is_number()) {
        out.values.push_back(item.get<double>());
      } else {
        refuse(origin, where() + " is " + shown(item) + ", expected a number or a bool");
      }
      return;
    }
    if (!item.is_array() || static_cast<int64_t>(item.size()) != out.shape[depth]) {
      refuse(origin, where() + " is " +
                         (item.is_array() ? "an array of " + std::to_string(item.size())
                                          : shown(item)) +
                         ", expected an array of " + std::to_string(out.shape[depth]) +
                         " (the array is not rectangular)");
    }
    stack.push_back({&item, 0});
    index.push_back(0);
  };
  visit(value);
  while (!stack.empty()) {
    Frame& top = stack.back();
    if (top.next == top.array->size()) {
      stack.pop_back();
      index.pop_back();
      continue;
    }
    index.back() = top.next;
    const nlohmann::json& item = (*top.array)[top.next++];
    visit(item);
  }
  return out;
}

ResetRequest reset_request(const nlohmann::json& value, const std::string& origin) {
  ResetRequest reset;
  if (value.is_boolean()) {
    reset.all = value.get<bool>();
    return reset;
  }
  if (value.is_array()) {
    for (const nlohmann::json& row : value) {
      if (!row.is_boolean()) break;
      reset.rows.push_back(row.get<bool>());
    }
    if (reset.rows.size() == value.size()) {
      reset.per_row = true;
      return reset;
    }
  }
  refuse(origin, "'__reset__' is " + shown(value) +
                     ", expected true, false or one bool per row ([true, false, ...])");
}

}  // namespace tdaot::detail
