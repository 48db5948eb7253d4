// The hostile, tampered and unsigned packages every runtime must refuse, and what the refusal
// says: one list, written once per test into a temp dir from the fixture packages (libzip
// edits), that the full runtime's tests (test_integrity.cpp) and the lite runtime's
// (lite/test_lite_packages.cpp) both load, each through its own Policy. Torch-free.
#pragma once

#include <functional>
#include <string>
#include <typeinfo>
#include <vector>

#include "fixtures.h"
#include "tdaot/package.h"

namespace tdaot::test_packages {

struct Refusal {
  std::string name;  // the case, for failure messages
  std::string path;  // the package file
  PackageOptions options;
  const std::type_info* error;     // the exact tdaot::Error class thrown
  std::vector<std::string> parts;  // what its message holds
};

// Copies of tutorial.pt2 and tutorial_signed.pt2 written into `dir` (pinned to another digest or
// to no digest at all, a model library changed, a file added or removed, an entry climbing out
// of the extraction dir or absolute, a symlink or pipe entry, two top folders, a file above the
// size limit, unsigned with trusted keys, its signature removed, signed by another
// key, its manifest changed after signing, malformed signatures, unusable trusted keys, an
// extraction dir that cannot be made). Every case extracts (if at all) under `extract`, which a
// refusal must leave empty.
std::vector<Refusal> refusals(const fixtures::TempDir& dir, const std::string& extract);

// Runs `load` (a runtime loading refusal.path with refusal.options) and checks that it throws
// exactly refusal.error with refusal.parts in its message.
void expect_refused(const Refusal& refusal, const std::function<void()>& load);

}  // namespace tdaot::test_packages
