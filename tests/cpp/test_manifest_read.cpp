// Reading manifests out of package files (read_manifest and the Policy constructor): the
// fixture packages, and files that are not packages or carry no valid manifest. The manifest
// JSON schema itself is tested in test_manifest.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "tdaot/errors.h"
#include "tdaot/manifest.h"
#include "tdaot/torch/policy.h"
#include "test_support.h"

namespace tdaot {
namespace {

using nlohmann::json;
using test::catch_error;
using test::Contains;

TEST(ReadManifest, FixturePackages) {
  const Manifest tutorial = read_manifest(test::package_path("tutorial.pt2"));
  ASSERT_EQ(tutorial.inputs.size(), 1u);
  EXPECT_EQ(tutorial.inputs[0].key, "observation");
  EXPECT_EQ(tutorial.inputs[0].shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(tutorial.batch.min, 1);
  EXPECT_EQ(tutorial.batch.max, 64);
  const Manifest nested = read_manifest(test::package_path("nested.pt2"));
  ASSERT_EQ(nested.inputs.size(), 2u);
  EXPECT_EQ(nested.inputs[0].key, "agents.observation");
  EXPECT_EQ(nested.inputs[1].key, "robot.joints");
}

// Both read_manifest and the Policy constructor must refuse `path` with E naming it.
template <typename E>
void expect_refused(const std::string& path, const std::string& message) {
  for (const bool via_policy : {false, true}) {
    SCOPED_TRACE(via_policy ? "Policy" : "read_manifest");
    const auto error = catch_error<E>([&] {
      if (via_policy) {
        Policy policy(path);
      } else {
        read_manifest(path);
      }
    });
    ASSERT_TRUE(error);
    EXPECT_TRUE(Contains(error->what(), message));
    EXPECT_TRUE(Contains(error->what(), path));
    EXPECT_EQ(error->path(), path);
  }
}

TEST(ReadManifest, MissingFile) {
  test::TempDir dir;
  expect_refused<PackageError>(dir.file("absent.pt2"), "does not exist");
}

TEST(ReadManifest, Directory) {
  test::TempDir dir;
  expect_refused<PackageError>(dir.path(), "is a directory, not a .pt2 file");
}

TEST(ReadManifest, DevNull) {
  expect_refused<PackageError>("/dev/null", "is not a regular file, not a .pt2 file");
}

TEST(ReadManifest, RandomBytes) {
  test::TempDir dir;
  std::mt19937 random(7);
  std::string bytes(4096, '\0');
  for (char& c : bytes) c = static_cast<char>(random());
  test::write_file(dir.file("random.pt2"), bytes);
  expect_refused<PackageError>(dir.file("random.pt2"), "is not a .pt2 package (not a zip archive)");
}

TEST(ReadManifest, TruncatedZip) {
  test::TempDir dir;
  test::write_file(dir.file("truncated.pt2"), std::string("PK\x03\x04", 4) + "garbage");
  expect_refused<PackageError>(dir.file("truncated.pt2"),
                               "is not a .pt2 package (a damaged or truncated zip archive: ");
}

TEST(ReadManifest, Unreadable) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads files whatever their mode";
  test::TempDir dir;
  test::write_file(dir.file("locked.pt2"), "PK");
  std::filesystem::permissions(dir.file("locked.pt2"), std::filesystem::perms::none);
  expect_refused<PackageError>(dir.file("locked.pt2"), "cannot be read");
}

TEST(ReadManifest, ZipWithoutAotiModel) {
  test::TempDir dir;
  // A .pt2 archive whose only AOTInductor files were dropped.
  test::rewrite_package(test::package_path("tutorial.pt2"), dir.file("empty.pt2"),
                        [](const std::string& name, std::string&) {
                          return name.find("aotinductor") == std::string::npos;
                        });
  expect_refused<PackageError>(dir.file("empty.pt2"),
                               "is not a .pt2 package with an AOTInductor model 'model'");
}

TEST(ReadManifest, EntryEscapingTheExtractionDir) {
  // AOTInductor's loader extracts entries by their stored names; "../" must not reach it.
  test::TempDir dir;
  const std::string canary = "tdaot-canary-" + std::to_string(std::random_device()());
  const auto canary_path = std::filesystem::temp_directory_path() / canary;
  const std::string path = dir.file("evil.pt2");
  test::rewrite_package(test::package_path("tutorial.pt2"), path,
                        [](const std::string&, std::string&) { return true; },
                        {{"data/aotinductor/model/../../../../../" + canary, "pwned"}});
  expect_refused<PackageError>(
      path, "has an unsafe entry 'evil/data/aotinductor/model/../../../../../" + canary + "'");
  EXPECT_FALSE(std::filesystem::exists(canary_path)) << canary_path;
  std::filesystem::remove(canary_path);
}

TEST(ReadManifest, PackageWithoutManifest) {
  test::TempDir dir;
  test::rewrite_metadata(test::package_path("tutorial.pt2"), dir.file("plain.pt2"),
                         [](json& metadata) { metadata.erase(kManifestMetadataKey); });
  expect_refused<ManifestError>(
      dir.file("plain.pt2"), "has no 'tdaot.manifest' metadata: it was not built by tdaot.build");
}

TEST(ReadManifest, PackageWithBadManifestJson) {
  test::TempDir dir;
  test::rewrite_metadata(test::package_path("tutorial.pt2"), dir.file("bad.pt2"),
                         [](json& metadata) { metadata[kManifestMetadataKey] = "{not json"; });
  expect_refused<ManifestError>(dir.file("bad.pt2"), "invalid JSON");
}

TEST(ReadManifest, PackageWithFutureSchema) {
  test::TempDir dir;
  test::rewrite_manifest(test::package_path("tutorial.pt2"), dir.file("future.pt2"),
                         [](json& manifest) { manifest["schema_version"] = 3; });
  expect_refused<ManifestError>(dir.file("future.pt2"),
                                "field 'schema_version': unsupported schema version 3");
}

}  // namespace
}  // namespace tdaot
