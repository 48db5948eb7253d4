// Helpers of the lite runtime's tests (tests/cpp/lite), torch-free: test_support.h includes
// ATen, and these executables link only tdaot::lite (which is what shows the lite API needs no
// torch). The shared fixtures (../fixtures.h: fixture files, temp dirs, zip copies with edits,
// exception checks) and the expected outputs build_test_packages.py writes (lite_expected.json).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "../fixtures.h"

namespace tdaot::lite_test {

using fixtures::catch_error;
using fixtures::Contains;
using fixtures::edit_zip;
using fixtures::EntryEdit;
using fixtures::package_path;
using fixtures::read_file;
using fixtures::TempDir;
using fixtures::type_name;
using fixtures::write_file;

// build_test_packages.py's lite_expected.json, parsed once.
const nlohmann::json& expected();

}  // namespace tdaot::lite_test
