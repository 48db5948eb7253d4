// A model's "packed_weights" (ModelSpec::packed_weights): the manifest field read and written,
// and the refusals a user can meet. The packing itself, and a swap of such a model, run on a
// package whose wide layer goes to oneDNN (AVX-512 builds only): tests/python/test_tuning.py.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tdaot/errors.h"
#include "tdaot/torch/policy.h"
#include "test_support.h"

namespace tdaot {
namespace {

// A copy of the tutorial fixture whose model 'model' lists `names` as its packed weights.
std::string listing(const test::TempDir& dir, const nlohmann::json& names) {
  const std::string path = dir.file("packed.pt2");
  test::rewrite_manifest(test::package_path("tutorial.pt2"), path, [&](nlohmann::json& manifest) {
    for (nlohmann::json& model : manifest["models"]) {
      if (model["name"] == "model") model["packed_weights"] = names;
    }
  });
  return path;
}

TEST(PackedWeights, AWeightTheModelDoesNotHaveIsAPackageErrorNamingIt) {
  test::TempDir dir;
  const std::string path = listing(dir, {"module.no_such.weight"});
  const auto error = test::catch_error<PackageError>([&] { Policy policy(path); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(test::Contains(error->what(), "model 'model' of package '" + path +
                                                "' lists 'module.no_such.weight' among its "
                                                "packed_weights, but has no constant of that name"))
      << error->what();
  EXPECT_EQ(error->path(), path);
}

TEST(PackedWeights, ANameListedTwiceOrNotAStringIsAManifestErrorNamingTheField) {
  test::TempDir dir;
  const auto twice = test::catch_error<ManifestError>([&] { Policy policy(listing(dir, {"a", "a"})); });
  ASSERT_TRUE(twice);
  EXPECT_TRUE(test::Contains(twice->what(), "packed_weights[1]': 'a' is listed twice")) << twice->what();
  const auto number = test::catch_error<ManifestError>([&] { Policy policy(listing(dir, {7})); });
  ASSERT_TRUE(number);
  EXPECT_TRUE(test::Contains(number->what(), "packed_weights[0]'")) << number->what();
}

TEST(PackedWeights, TheFieldIsReadAndWrittenAndAbsentWithoutIt) {
  const Policy plain(test::package_path("tutorial.pt2"));
  for (const ModelSpec& model : plain.manifest().models) EXPECT_TRUE(model.packed_weights.empty());
  EXPECT_FALSE(test::Contains(plain.manifest().to_json(), "packed_weights"));
  Manifest copy = plain.manifest();
  copy.models[0].packed_weights = {"module.0.weight"};
  EXPECT_TRUE(test::Contains(copy.to_json(), "\"packed_weights\":[\"module.0.weight\"]")) << copy.to_json();
  const Manifest read = Manifest::from_json(copy.to_json(), "copy.pt2");
  EXPECT_EQ(read.models[0].packed_weights, std::vector<std::string>{"module.0.weight"});
}

}  // namespace
}  // namespace tdaot
