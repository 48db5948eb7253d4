// The lite runtime reads packages as the full runtime does (one shared core): the missing,
// hostile, tampered, unsigned and mis-pinned files of test_manifest_read.cpp, test_integrity.cpp
// and test_signature.cpp are refused by tdaot::lite::Policy too, with the same errors. And its
// own checks: a package with no lite model (naming each model and why it needs libtorch), and a
// model needing a symbol this process lacks, refused before its library is loaded.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/package/digest.h"
#include "lite/policy_impl.h"
#include "../package_refusals.h"
#include "lite_support.h"
#include "tdaot/errors.h"
#include "tdaot/lite.h"
#include "tdaot/manifest.h"

namespace tdaot {
namespace {

using lite_test::catch_error;
using lite_test::Contains;
using nlohmann::json;

std::string pkg(const std::string& name) { return lite_test::package_path(name); }

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

template <typename E>
void expect_refused(const std::string& path, const std::string& part,
                    const lite::PolicyOptions& options = {}) {
  SCOPED_TRACE(path);
  const auto error = catch_error<E>([&] { lite::Policy policy(path, options); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), part));
}

// ---- files that are not packages ----

TEST(LitePackage, MissingFileDirectoryAndDevNull) {
  lite_test::TempDir dir;
  expect_refused<PackageError>(dir.file("absent.pt2"), "does not exist");
  expect_refused<PackageError>(dir.path(), "is a directory, not a .pt2 file");
  expect_refused<PackageError>("/dev/null", "is not a regular file, not a .pt2 file");
}

TEST(LitePackage, RandomBytesAndATruncatedZip) {
  lite_test::TempDir dir;
  std::mt19937 random(7);
  std::string bytes(4096, '\0');
  for (char& c : bytes) c = static_cast<char>(random());
  lite_test::write_file(dir.file("random.pt2"), bytes);
  expect_refused<PackageError>(dir.file("random.pt2"), "is not a .pt2 package (not a zip archive)");
  lite_test::write_file(dir.file("truncated.pt2"), std::string("PK\x03\x04", 4) + "garbage");
  expect_refused<PackageError>(dir.file("truncated.pt2"),
                               "is not a .pt2 package (a damaged or truncated zip archive: ");
}

// Every hostile, tampered and unsigned package of the shared list (../package_refusals.h), which
// the full runtime's test_integrity.cpp loads too: the same error class and message, and nothing
// left in the extraction dir.
TEST(LitePackage, EveryHostileTamperedAndUnsignedPackageIsRefusedAsByTheFullRuntime) {
  lite_test::TempDir dir;
  lite_test::TempDir extract;
  for (const test_packages::Refusal& refusal : test_packages::refusals(dir, extract.path())) {
    lite::PolicyOptions options;
    static_cast<PackageOptions&>(options) = refusal.options;
    test_packages::expect_refused(refusal, [&] { lite::Policy policy(refusal.path, options); });
    EXPECT_TRUE(std::filesystem::is_empty(extract.path())) << refusal.name;
  }
}

// Issue 38: a manifest declaring float16 or float64 for a float32 model ran on reinterpreted
// bytes; the model's own record of its dtypes (its wrapper source) now refuses it, as the full
// runtime's runner does at warm-up. Nothing is left in the extraction directory.
TEST(LitePackage, AManifestDtypeOtherThanTheModelsIsRefused) {
  lite_test::TempDir dir;
  lite_test::TempDir extract;
  for (const std::string dtype : {"float16", "float64"}) {
    const std::string path = dir.file(dtype + ".pt2");
    lite_test::edit_zip(pkg("tutorial.pt2"), path, [&](const std::string& name, std::string& bytes) {
      if (!ends_with(name, "wrapper_metadata.json")) return false;
      json metadata = json::parse(bytes);
      json manifest = json::parse(metadata.at(kManifestMetadataKey).get<std::string>());
      manifest["inputs"][0]["dtype"] = dtype;
      metadata[kManifestMetadataKey] = manifest.dump();
      bytes = metadata.dump();
      return true;
    });
    lite::PolicyOptions options;
    options.temp_dir = extract.path();
    expect_refused<ManifestError>(path,
                                  "model 'b1' was compiled for input 'observation' of dtype "
                                  "float32 (its wrapper source's ArrayRefTensor types), but the "
                                  "manifest says " + dtype,
                                  options);
    EXPECT_TRUE(std::filesystem::is_empty(extract.path()));
  }
}

// ---- integrity: the pin and the file digests ----

TEST(LitePackage, ThePinnedDigestInEitherCaseLoadsAnotherIsRefused) {
  const lite::Policy policy(pkg("tutorial.pt2"));
  lite::PolicyOptions pinned;
  pinned.expected_sha256 = policy.sha256();
  EXPECT_EQ(lite::Policy(pkg("tutorial.pt2"), pinned).sha256(), policy.sha256());
  std::transform(pinned.expected_sha256.begin(), pinned.expected_sha256.end(),
                 pinned.expected_sha256.begin(), [](unsigned char c) { return std::toupper(c); });
  EXPECT_EQ(lite::Policy(pkg("tutorial.pt2"), pinned).sha256(), policy.sha256());
  lite::PolicyOptions other;
  other.expected_sha256 = std::string(64, '0');
  expect_refused<IntegrityError>(pkg("tutorial.pt2"),
                                 "has sha256 " + policy.sha256() +
                                     ", but the pinned expected_sha256 is " + std::string(64, '0'),
                                 other);
}

// ---- signatures ----

TEST(LitePackage, SignaturesAreCheckedWithTrustedKeys) {
  lite::PolicyOptions trusting;
  trusting.trusted_keys = {pkg("keys/public.pem")};
  const lite::Policy signed_policy(pkg("tutorial_signed.pt2"), trusting);
  EXPECT_EQ(signed_policy.bind(1).model(), "b1");
  // Without trusted keys a signed package loads as any other.
  EXPECT_EQ(lite::Policy(pkg("tutorial_signed.pt2")).sha256(), signed_policy.sha256());
  expect_refused<SignatureError>(pkg("tutorial.pt2"), "is not signed, but trusted keys are set",
                                 trusting);
  lite::PolicyOptions other;
  other.trusted_keys = {pkg("other_keys/public.pem")};
  expect_refused<SignatureError>(pkg("tutorial_signed.pt2"),
                                 "is signed only by keys that are not trusted", other);
  lite::PolicyOptions garbage;
  garbage.trusted_keys = {pkg("lite_expected.json")};
  expect_refused<SignatureError>(pkg("tutorial_signed.pt2"), "is not a PEM public key", garbage);
}

// ---- what the lite runtime serves ----

TEST(LitePackage, APackageWithNoLiteModelNamesItsModelsAndWhy) {
  const std::string path = pkg("tutorial_throughput.pt2");
  const auto error = catch_error<HostMismatchError>([&] { lite::Policy policy(path); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "package '" + path +
                                          "' has no model that runs on the lite runtime (no "
                                          "libtorch): 'model' (batch 1..64): "));
  EXPECT_TRUE(Contains(error->what(), "needs libtorch: aoti_torch_cpu_addmm_out (ATen addmm)"));
  EXPECT_TRUE(Contains(error->what(), "; load it with tdaot::Policy (tdaot::runtime)"));
}

TEST(LiteNeeds, TheRuntimeProvidesWhatEveryFixtureLiteModelNeeds) {
  for (const char* name : {"tutorial.pt2", "nested.pt2", "recurrent.pt2", "tutorial_b14.pt2",
                           "legged.pt2", "recurrent_b14.pt2"}) {
    SCOPED_TRACE(name);
    const lite::Policy policy(pkg(name));
    int lite_models = 0;
    for (const ModelSpec& model : policy.manifest().models) {
      if (!model.lite || !model.lite->runs) continue;
      ++lite_models;
      EXPECT_FALSE(model.lite->needs.empty()) << model.name;
      EXPECT_EQ(detail::unprovided(model.lite->needs), std::vector<std::string>{}) << model.name;
    }
    EXPECT_GT(lite_models, 0);
  }
}

TEST(LiteNeeds, UnprovidedNamesTheSymbolsThisProcessLacks) {
  EXPECT_EQ(detail::unprovided({}), std::vector<std::string>{});
  EXPECT_EQ(detail::unprovided({"aoti_torch_dtype_float32", "aoti_torch_tdaot_test_absent",
                                "aoti_torch_empty_strided", "Sleef_tdaot_test_absent"}),
            (std::vector<std::string>{"aoti_torch_tdaot_test_absent", "Sleef_tdaot_test_absent"}));
  // ATen's out-variant operators are libtorch's, never the lite runtime's.
  EXPECT_EQ(detail::unprovided({"aoti_torch_cpu_addmm_out"}),
            std::vector<std::string>{"aoti_torch_cpu_addmm_out"});
}

// A copy of tutorial.pt2 whose b1 library is replaced by `library` (its digest resealed in the
// manifest, so the integrity checks pass) and whose b1 lite record needs `extra` too.
std::string edited_b1(const lite_test::TempDir& dir, const std::string& file, const std::string& library,
                      const std::vector<std::string>& extra) {
  std::string library_name;
  lite_test::edit_zip(pkg("tutorial.pt2"), dir.file("step.pt2"),
                      [&](const std::string& name, std::string& bytes) {
                        if (name.find("/data/aotinductor/b1/") == std::string::npos ||
                            !ends_with(name, ".so")) {
                          return false;
                        }
                        bytes = library;
                        library_name = name.substr(name.find("data/"));
                        return true;
                      });
  const std::string path = dir.file(file);
  lite_test::edit_zip(dir.file("step.pt2"), path, [&](const std::string& name, std::string& bytes) {
    // The loaders read the wrappers' metadata (as test_support.cpp's rewrite_metadata).
    if (!ends_with(name, "wrapper_metadata.json")) return false;
    json metadata = json::parse(bytes);
    json manifest = json::parse(metadata.at(kManifestMetadataKey).get<std::string>());
    manifest["files"][library_name] = detail::sha256_hex(library);
    for (json& model : manifest["models"]) {
      if (model["name"] != "b1") continue;
      for (const std::string& symbol : extra) model["lite"]["needs"].push_back(symbol);
    }
    metadata[kManifestMetadataKey] = manifest.dump();
    bytes = metadata.dump();
    return true;
  });
  return path;
}

// The needs check comes before the model library is loaded: a library that cannot be loaded at
// all is never reached when its record needs a symbol this process lacks.
TEST(LiteNeeds, AModelNeedingAnUnprovidedSymbolIsRefusedBeforeLoading) {
  lite_test::TempDir dir;
  const std::string garbage = "this is not an ELF library";
  // The control: the same garbage library with the real needs reaches the loader.
  const std::string loads = edited_b1(dir, "garbage.pt2", garbage, {});
  const auto load_error = catch_error<PackageError>([&] { lite::Policy policy(loads); });
  ASSERT_TRUE(load_error);
  EXPECT_TRUE(Contains(load_error->what(), "model 'b1'"));

  const std::string needs = edited_b1(dir, "needs.pt2", garbage,
                                      {"aoti_torch_tdaot_test_absent", "Sleef_tdaot_test_absent"});
  const auto error = catch_error<HostMismatchError>([&] { lite::Policy policy(needs); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "package '" + needs + "' model 'b1' needs symbols the lite "
                                      "runtime does not provide: aoti_torch_tdaot_test_absent, "
                                      "Sleef_tdaot_test_absent (refused before loading it)"));
  // And with the real library, the same record is refused just the same.
  const std::string real = [&] {
    std::string bytes;
    lite_test::edit_zip(pkg("tutorial.pt2"), dir.file("scratch.pt2"),
                        [&](const std::string& name, std::string& b) {
                          if (name.find("/data/aotinductor/b1/") != std::string::npos &&
                              ends_with(name, ".so")) {
                            bytes = b;
                          }
                          return false;
                        });
    return bytes;
  }();
  ASSERT_FALSE(real.empty());
  const std::string real_needs = edited_b1(dir, "real_needs.pt2", real, {"aoti_torch_tdaot_test_absent"});
  expect_refused<HostMismatchError>(real_needs, "needs symbols the lite runtime does not provide: "
                                                "aoti_torch_tdaot_test_absent");
  // The resealed copy with the real library and real needs loads: the edit itself is harmless.
  EXPECT_EQ(lite::Policy(edited_b1(dir, "same.pt2", real, {})).bind(1).model(), "b1");
}

}  // namespace
}  // namespace tdaot
