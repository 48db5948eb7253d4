// Integrity through the C++ API: the sha256 of every file against the manifest, pinning the whole
// package, a package changed while it is read, and the private extraction directory being gone
// on every path. Hostile zip structures
// (climbing names, symlinks, huge declared sizes...) are in tests/python/test_packages.py.
#include <ATen/Functions.h>
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/package/archive.h"
#include "core/package/digest.h"
#include "core/package/package.h"
#include "tdaot/errors.h"
#include "tdaot/torch/policy.h"
#include "package_refusals.h"
#include "test_support.h"

namespace tdaot {
namespace {

namespace fs = std::filesystem;
using test::catch_error;
using test::Contains;

std::string tutorial() { return test::package_path("tutorial.pt2"); }

std::string file_sha256(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return detail::sha256_hex(std::string(std::istreambuf_iterator<char>(in), {}));
}

bool is_library(const std::string& name) {
  return name.size() > 3 && name.compare(name.size() - 3, 3, ".so") == 0;
}

// Options extracting into `dir`, which each test checks is empty afterwards.
PolicyOptions extracting_into(const test::TempDir& dir) {
  PolicyOptions options;
  options.temp_dir = dir.path();
  return options;
}

bool is_empty(const test::TempDir& dir) { return fs::is_empty(dir.path()); }

TEST(Integrity, LoadsAndReportsTheDigestOfThePackage) {
  test::TempDir extract;
  const Policy policy(tutorial(), extracting_into(extract));
  EXPECT_EQ(policy.sha256(), file_sha256(tutorial()));
  EXPECT_EQ(verify_package(tutorial()), policy.sha256());
  EXPECT_FALSE(policy.manifest().files.empty());
  // CPU packages need their files only while loading.
  EXPECT_TRUE(is_empty(extract));
  EXPECT_EQ(policy.run_positional({at::ones({2, 3})})[2].sizes(), (at::IntArrayRef{2, 2}));
}

TEST(Integrity, PinnedDigestInEitherCaseLoads) {
  std::string upper = file_sha256(tutorial());
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  PolicyOptions options;
  options.expected_sha256 = upper;
  EXPECT_NO_THROW(Policy(tutorial(), options));
  EXPECT_EQ(verify_package(tutorial(), upper), file_sha256(tutorial()));
}

TEST(Integrity, AnotherPinnedDigestIsRefusedBeforeAnythingIsExtracted) {
  test::TempDir extract;
  PolicyOptions options = extracting_into(extract);
  options.expected_sha256 = std::string(64, '0');
  const auto error = catch_error<IntegrityError>([&] { Policy policy(tutorial(), options); });
  ASSERT_TRUE(error);
  EXPECT_EQ(error->path(), tutorial());
  EXPECT_TRUE(Contains(error->what(), "package '" + tutorial() + "' has sha256 " +
                                          file_sha256(tutorial()) +
                                          ", but the pinned expected_sha256 is " +
                                          std::string(64, '0')));
  EXPECT_TRUE(is_empty(extract));
  EXPECT_TRUE(catch_error<IntegrityError>([&] { verify_package(tutorial(), std::string(64, 'f')); }));
}

TEST(Integrity, MalformedPinNamesTheValue) {
  PolicyOptions options;
  options.expected_sha256 = "sha256:abc";
  const auto error = catch_error<Error>([&] { Policy policy(tutorial(), options); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "expected_sha256 must be a sha256 digest (64 hex digits), "
                                      "got 'sha256:abc'"));
}

TEST(Integrity, ModifiedLibraryIsRefusedAndNothingIsLeft) {
  test::TempDir dir;
  test::TempDir extract;
  const std::string path = dir.file("tampered.pt2");
  std::string library;
  test::rewrite_package(tutorial(), path, [&](const std::string& name, std::string& bytes) {
    if (is_library(name) && library.empty()) {  // the first of the package's models
      bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x5a);
      library = name;
    }
    return true;
  });
  const auto error = catch_error<IntegrityError>([&] { Policy(path, extracting_into(extract)); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "file '" + library + "' has sha256 "));
  EXPECT_TRUE(Contains(error->what(), "but the manifest records"));
  EXPECT_TRUE(is_empty(extract));
  EXPECT_TRUE(catch_error<IntegrityError>([&] { verify_package(path); }));
}

TEST(Integrity, UnlistedAndMissingFilesAreRefused) {
  test::TempDir dir;
  const std::string added = dir.file("added.pt2");
  test::rewrite_package(
      tutorial(), added, [](const std::string&, std::string&) { return true; },
      {{"data/aotinductor/model/libextra.so", "\x7f" "ELF"}});
  const auto extra = catch_error<IntegrityError>([&] { verify_package(added); });
  ASSERT_TRUE(extra);
  EXPECT_TRUE(Contains(extra->what(),
                       "holds a file 'data/aotinductor/model/libextra.so' that its manifest does "
                       "not list"));

  const std::string removed = dir.file("removed.pt2");
  std::string dropped;
  test::rewrite_package(tutorial(), removed, [&](const std::string& name, std::string&) {
    if (name.find(".kernel.cpp") == std::string::npos) return true;
    dropped = name;
    return false;
  });
  const auto missing = catch_error<IntegrityError>([&] { Policy policy(removed); });
  ASSERT_TRUE(missing);
  EXPECT_TRUE(Contains(missing->what(), "lacks the file '" + dropped + "' that its manifest lists"));
}

// Every hostile, tampered and unsigned package of the shared list (package_refusals.h), which the
// lite runtime's test_lite_packages.cpp loads too: the same error class and message, and nothing
// left in the extraction dir.
TEST(Integrity, EveryHostileTamperedAndUnsignedPackageIsRefusedAsByTheLiteRuntime) {
  test::TempDir dir;
  test::TempDir extract;
  for (const test_packages::Refusal& refusal : test_packages::refusals(dir, extract.path())) {
    PolicyOptions options;
    static_cast<PackageOptions&>(options) = refusal.options;
    test_packages::expect_refused(refusal, [&] { Policy policy(refusal.path, options); });
    EXPECT_TRUE(is_empty(extract)) << refusal.name;
  }
}

TEST(Integrity, ExtractionDirectoryThatCannotBeCreatedIsNamed) {
  test::TempDir dir;
  PolicyOptions options;
  options.temp_dir = dir.file("missing/below");
  const auto error = catch_error<PackageError>([&] { Policy policy(tutorial(), options); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "no temporary directory could be created under '" +
                                          options.temp_dir + "'"));
}

// The package is read once in full (its sha256), then again only where needed; every byte read
// again that no manifest digest covers is compared with that first read, so what is parsed is
// the file whose sha256 was reported and pinned, even if it is written in place meanwhile.
TEST(Integrity, PackageChangedInPlaceWhileReadIsRefused) {
  test::TempDir dir;
  const std::string path = dir.file("changing.pt2");
  fs::copy_file(tutorial(), path);
  detail::PackageFile file(path, uint64_t{1} << 30);
  EXPECT_EQ(file.sha256(), file_sha256(tutorial()));
  char bytes[8];
  ASSERT_EQ(file.read(0, bytes, sizeof bytes, true), 8);
  ASSERT_GT(file.size(), 3 * file.block_size());
  const uint64_t at = 2 * file.block_size() + 3;  // a block not read yet
  {  // one byte flipped in place: the same file, as an in-place writer or a bad disk leaves it
    std::fstream out(path, std::ios::in | std::ios::out | std::ios::binary);
    out.seekg(static_cast<std::streamoff>(at));
    const char byte = static_cast<char>(out.get());
    out.seekp(static_cast<std::streamoff>(at));
    out.put(static_cast<char>(byte ^ 0x5a));
  }
  EXPECT_EQ(file.read(at - 3, bytes, sizeof bytes, true), -1);
  const auto error = catch_error<IntegrityError>([&] { file.require_unchanged(); });
  ASSERT_TRUE(error);
  EXPECT_EQ(error->path(), path);
  EXPECT_TRUE(Contains(error->what(), "package '" + path + "' changed while it was being read (its "
                                      "bytes at offset " + std::to_string(at - 3) +
                                      " differ from those read first, whose sha256 is " +
                                      file_sha256(tutorial()) + "); refusing to load it"));
}

TEST(Integrity, PackageTruncatedWhileExtractedIsRefusedAndNothingIsLeft) {
  test::TempDir dir;
  test::TempDir extract;
  const std::string path = dir.file("shrinking.pt2");
  fs::copy_file(tutorial(), path);
  const detail::Package package(path, PackageOptions{});
  fs::resize_file(path, 1024);  // every extracted file lies (partly) beyond
  const auto error = catch_error<IntegrityError>(
      [&] { package.extract(extract.path(), {package.manifest().models.front().name}); });
  ASSERT_TRUE(error);
  EXPECT_EQ(error->path(), path);
  EXPECT_TRUE(Contains(error->what(), "package '" + path + "' changed while it was being read"));
  EXPECT_TRUE(is_empty(extract));
}

}  // namespace
}  // namespace tdaot
