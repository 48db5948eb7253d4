// Helpers of the lite runtime's tests (tests/cpp/lite), torch-free: test_support.h includes
// ATen, and these executables link only tdaot::lite (which is what shows the lite API needs no
// torch). Fixture packages, temp dirs, zip copies with edits (libzip), exception checks and the
// expected outputs build_test_packages.py writes (lite_expected.json).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <typeinfo>

namespace tdaot::lite_test {

// Path of a file written by the build_test_packages fixture ($TDAOT_TEST_PACKAGES/<name>).
std::string package_path(const std::string& name);

// build_test_packages.py's lite_expected.json, parsed once.
const nlohmann::json& expected();

// A fresh directory under the system temp dir, removed with the object.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

void write_file(const std::string& path, const std::string& bytes);

// Copies the zip `src` to `dst`, then, through libzip, lets `edit` change the bytes of each
// entry (its full name, the archive prefix included; return true when changed) and adds
// `extra` entries (full names). The copy's CRCs are right; the manifest's digests are not
// updated (that is what an integrity test wants).
using EntryEdit = std::function<bool(const std::string& name, std::string& bytes)>;
void edit_zip(const std::string& src, const std::string& dst, const EntryEdit& edit,
              const std::map<std::string, std::string>& extra = {});

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

}  // namespace tdaot::lite_test
