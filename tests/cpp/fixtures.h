// Torch-free helpers every C++ test executable shares, the full runtime's (test_support.h) and
// the lite runtime's (lite/lite_support.h, which link no torch): fixture files, temp dirs, file
// bytes, zip copies with edits (libzip), exception and message checks. Both headers bring these into their own namespaces.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <typeinfo>

namespace tdaot::fixtures {

// Path of a file written by the build_test_packages fixture ($TDAOT_TEST_PACKAGES/<name>).
std::string package_path(const std::string& name);

// The JSON file package_path(name), parsed once per name (a failure and {} when unreadable).
const nlohmann::json& json_file(const std::string& name);

// A fresh directory under the system temp dir, removed with the object.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Path of `name` inside the directory.
  std::string file(const std::string& name) const;
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// Writes `bytes` to `path`.
void write_file(const std::string& path, const std::string& bytes);
// The bytes of `path` (a failure and "" when unreadable).
std::string read_file(const std::string& path);

// Copies the zip `src` to `dst`, then, through libzip, lets `edit` change the bytes of each
// entry (its full name, the archive prefix included; return true when changed), removes the
// entries `drop` (when given) says to, and adds `extra` entries (full names). The copy's CRCs are
// right; the manifest's digests are not updated (that is what an integrity test wants).
using EntryEdit = std::function<bool(const std::string& name, std::string& bytes)>;
void edit_zip(const std::string& src, const std::string& dst, const EntryEdit& edit,
              const std::map<std::string, std::string>& extra = {},
              const std::function<bool(const std::string& name)>& drop = {});

// The demangled name of a type, for messages.
std::string type_name(const std::type_info& type);

// Runs `f` and returns the exception of type E it throws; records a failure (naming what was
// thrown instead) and returns nullopt otherwise.
template <typename E, typename F>
std::optional<E> catch_error(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected " << type_name(typeid(E)) << ", got " << type_name(typeid(e))
                  << ": " << e.what();
    return std::nullopt;
  }
  ADD_FAILURE() << "expected " << type_name(typeid(E)) << ", nothing thrown";
  return std::nullopt;
}

// EXPECT_TRUE(Contains(text, part)) prints both strings when it fails.
::testing::AssertionResult Contains(const std::string& text, const std::string& part);

}  // namespace tdaot::fixtures
