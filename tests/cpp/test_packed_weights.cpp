// A model's "packed_weights" and "packed_convolutions" (ModelSpec): the manifest fields read and
// written, and the refusals a user can meet. The packing itself, and a swap of such a model, run
// on packages whose wide layer or convolutions go to oneDNN: tests/python/test_tuning.py.
#include <gtest/gtest.h>

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tdaot/errors.h"
#include "tdaot/torch/policy.h"
#include "test_support.h"

namespace tdaot {
namespace {

// A copy of the tutorial fixture whose model 'model' lists `names` as its `field`.
std::string listing(const test::TempDir& dir, const nlohmann::json& names,
                    const std::string& field = "packed_weights") {
  const std::string path = dir.file("packed.pt2");
  test::rewrite_manifest(test::package_path("tutorial.pt2"), path, [&](nlohmann::json& manifest) {
    for (nlohmann::json& model : manifest["models"]) {
      if (model["name"] == "model") model[field] = names;
    }
  });
  return path;
}

// One "packed_convolutions" entry of a 3x3 convolution, padding 1, for `weight`.
nlohmann::json convolution(const std::string& weight) {
  return {{"weight", weight}, {"padding", {1, 1}}, {"stride", {1, 1}}, {"dilation", {1, 1}}, {"groups", 1}};
}

// The ManifestError a 'model' listing `convolutions` as its packed_convolutions meets.
std::string convolution_refusal(const test::TempDir& dir, const std::vector<nlohmann::json>& entries) {
  nlohmann::json list = nlohmann::json::array();
  for (const nlohmann::json& entry : entries) list.push_back(entry);
  const auto error =
      test::catch_error<ManifestError>([&] { Policy policy(listing(dir, list, "packed_convolutions")); });
  return error ? error->what() : "no error";
}

// Loading `path`, whose model 'model' lists `name` in `field`, is a PackageError naming the
// package, the model, the name and the field.
void expect_unknown_weight(const std::string& path, const std::string& name, const std::string& field) {
  const auto error = test::catch_error<PackageError>([&] { Policy policy(path); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(test::Contains(error->what(), "model 'model' of package '" + path + "' lists '" + name +
                                                "' among its " + field +
                                                ", but has no constant of that name"))
      << error->what();
  EXPECT_EQ(error->path(), path);
}

TEST(PackedWeights, AWeightTheModelDoesNotHaveIsAPackageErrorNamingIt) {
  test::TempDir dir;
  expect_unknown_weight(listing(dir, {"module.no_such.weight"}), "module.no_such.weight", "packed_weights");
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

TEST(PackedConvolutions, AWeightTheModelDoesNotHaveIsAPackageErrorNamingIt) {
  test::TempDir dir;
  const std::string path =
      listing(dir, nlohmann::json::array({convolution("module.conv.weight")}), "packed_convolutions");
  expect_unknown_weight(path, "module.conv.weight", "packed_convolutions");
}

TEST(PackedConvolutions, AnEntryWithAWrongGeometryIsAManifestErrorNamingTheField) {
  test::TempDir dir;
  nlohmann::json three = convolution("w");
  three["padding"] = {1, 1, 1};
  EXPECT_TRUE(test::Contains(convolution_refusal(dir, {three}),
                             "packed_convolutions[0].padding': expected 2 integers (height, width), got 3"));
  nlohmann::json zero = convolution("w");
  zero["stride"] = {2, 0};
  EXPECT_TRUE(test::Contains(convolution_refusal(dir, {zero}),
                             "packed_convolutions[0].stride[1]': expected an integer >= 1, got 0"));
  nlohmann::json negative = convolution("w");
  negative["padding"] = {-1, 0};
  EXPECT_TRUE(test::Contains(convolution_refusal(dir, {negative}),
                             "packed_convolutions[0].padding[0]': expected an integer >= 0, got -1"));
  nlohmann::json no_groups = convolution("w");
  no_groups.erase("groups");
  EXPECT_TRUE(test::Contains(convolution_refusal(dir, {convolution("v"), no_groups}),
                             "packed_convolutions[1].groups': missing"));
  EXPECT_TRUE(test::Contains(convolution_refusal(dir, {7}), "packed_convolutions[0]': expected an object"));
}

TEST(PackedConvolutions, AWeightListedTwiceOrAlsoAsALinearWeightIsAManifestError) {
  test::TempDir dir;
  EXPECT_TRUE(test::Contains(convolution_refusal(dir, {convolution("w"), convolution("w")}),
                             "packed_convolutions[1].weight': 'w' is listed twice among the packed weights"));
  const std::string both = dir.file("both.pt2");
  test::rewrite_manifest(test::package_path("tutorial.pt2"), both, [&](nlohmann::json& manifest) {
    manifest["models"][0]["packed_weights"] = {"w"};
    manifest["models"][0]["packed_convolutions"] = nlohmann::json::array({convolution("w")});
  });
  const auto error = test::catch_error<ManifestError>([&] { Policy policy(both); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(test::Contains(error->what(), "packed_convolutions[0].weight': 'w' is listed twice"))
      << error->what();
}

TEST(PackedConvolutions, TheFieldIsReadAndWrittenAndAbsentWithoutIt) {
  const Policy plain(test::package_path("tutorial.pt2"));
  EXPECT_FALSE(test::Contains(plain.manifest().to_json(), "packed_convolutions"));
  Manifest copy = plain.manifest();
  copy.models[0].packed_convolutions = {PackedConvolution{"module.c.weight", {0, 1}, {4, 2}, {1, 1}, 2}};
  EXPECT_TRUE(test::Contains(copy.to_json(),
                             "\"packed_convolutions\":[{\"weight\":\"module.c.weight\",\"padding\":[0,1],"
                             "\"stride\":[4,2],\"dilation\":[1,1],\"groups\":2}]"))
      << copy.to_json();
  const Manifest read = Manifest::from_json(copy.to_json(), "copy.pt2");
  ASSERT_EQ(read.models[0].packed_convolutions.size(), 1u);
  const PackedConvolution& conv = read.models[0].packed_convolutions[0];
  EXPECT_EQ(conv.weight, "module.c.weight");
  EXPECT_EQ(conv.padding, (std::array<int64_t, 2>{0, 1}));
  EXPECT_EQ(conv.stride, (std::array<int64_t, 2>{4, 2}));
  EXPECT_EQ(conv.dilation, (std::array<int64_t, 2>{1, 1}));
  EXPECT_EQ(conv.groups, 2);
}

}  // namespace
}  // namespace tdaot
