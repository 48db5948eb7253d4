// The manifest conformance corpus (tests/manifests/README.md), run against the C++ parser; the
// Python tests run the same files through tdaot._C (tests/python/test_manifest_corpus.py).
//
// valid/NAME.json must parse and round-trip (from_json -> to_json -> from_json -> to_json gives
// the same text); invalid/NAME.json must throw ManifestError whose message contains
// "manifest of 'NAME.json': " followed by the text of invalid/NAME.error. Files named
// unsealed_*.json are parsed as unsealed manifests (no file digests yet).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/manifest/manifest_internal.h"
#include "tdaot/errors.h"
#include "tdaot/manifest.h"

#ifndef TDAOT_MANIFEST_CORPUS
#error "TDAOT_MANIFEST_CORPUS must name the tests/manifests directory"
#endif

namespace tdaot {
namespace {

namespace fs = std::filesystem;

const fs::path kCorpus = TDAOT_MANIFEST_CORPUS;

std::string read_text(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("cannot read " + path.string());
  std::ostringstream out;
  out << file.rdbuf();
  return out.str();
}

// The corpus files of one kind, sorted; empty when the directory is missing (a test below
// then fails, rather than the suite silently running nothing).
std::vector<std::string> cases(const char* kind) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(kCorpus / kind, ec)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

Sealing sealing_of(const std::string& name) {
  return name.rfind("unsealed_", 0) == 0 ? Sealing::unsealed : Sealing::sealed;
}

// gtest parameter names allow only [A-Za-z0-9_].
std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

TEST(ManifestCorpus, CoversEveryRuleWithEnoughCases) {
  const auto valid = cases("valid");
  const auto invalid = cases("invalid");
  EXPECT_GE(valid.size(), 10u) << kCorpus;
  EXPECT_GE(valid.size() + invalid.size(), 30u) << kCorpus;
  for (const auto& name : invalid) {
    EXPECT_TRUE(fs::is_regular_file(kCorpus / "invalid" / (name + ".error")))
        << "invalid/" << name << ".json has no " << name << ".error";
  }
}

class ValidManifest : public ::testing::TestWithParam<std::string> {};

TEST_P(ValidManifest, ParsesAndRoundTrips) {
  const std::string file = GetParam() + ".json";
  const Sealing sealing = sealing_of(GetParam());
  const std::string text = read_text(kCorpus / "valid" / file);
  Manifest manifest;
  try {
    manifest = parse_manifest(text, file, sealing);
  } catch (const ManifestError& e) {
    FAIL() << e.what();
  }
  const std::string once = manifest.to_json();
  const Manifest again = parse_manifest(once, file, sealing);
  EXPECT_EQ(again.to_json(), once);
  EXPECT_EQ(parse_manifest(manifest.to_json(2), file, sealing).to_json(), once);
  EXPECT_EQ(again.files.empty(), sealing == Sealing::unsealed);
}

INSTANTIATE_TEST_SUITE_P(Corpus, ValidManifest, ::testing::ValuesIn(cases("valid")), test_name);

class InvalidManifest : public ::testing::TestWithParam<std::string> {};

TEST_P(InvalidManifest, IsRefusedNamingTheOriginAndField) {
  const std::string file = GetParam() + ".json";
  const std::string text = read_text(kCorpus / "invalid" / file);
  std::string expected = read_text(kCorpus / "invalid" / (GetParam() + ".error"));
  expected.erase(expected.find_last_not_of("\r\n") + 1);  // the file's final newline
  try {
    parse_manifest(text, file, sealing_of(GetParam()));
    FAIL() << file << " was accepted; expected: " << expected;
  } catch (const ManifestError& e) {
    EXPECT_NE(std::string(e.what()).find("manifest of '" + file + "': " + expected),
              std::string::npos)
        << "message: " << e.what() << "\nexpected: " << expected;
    EXPECT_EQ(e.path(), file);
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, InvalidManifest, ::testing::ValuesIn(cases("invalid")),
                         test_name);

}  // namespace
}  // namespace tdaot
