// Packages of several models: each call runs on the model serving its batch size, on every path
// (run, run_positional, Session), with the same checks for every model; a package without a
// "models" list still loads; every refusal names the model or batch at fault.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tdaot/errors.h"
#include "tdaot/torch/policy.h"
#include "tdaot/torch/session.h"
#include "test_support.h"

namespace tdaot {
namespace {

using test::catch_error;
using test::Contains;

// tutorial_b14.pt2: 'model' 1..64 (throughput), 'b1' 1 and 'b4' 4 (latency).
std::string multi() { return test::package_path("tutorial_b14.pt2"); }

Policy load_only(const std::string& path, const std::string& model) {
  PolicyOptions options;
  options.model_name = model;
  return Policy(path, options);
}

void expect_close(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].sizes(), want[i].sizes());
    EXPECT_TRUE(at::allclose(got[i], want[i], 1e-4, 1e-5))
        << "output " << i << " differs by " << (got[i] - want[i]).abs().max().item<double>();
  }
}

void expect_equal(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(at::equal(got[i], want[i])) << i;
}

TEST(ModelFor, TakesTheNarrowestRangeAndTheFirstOfEqualOnes) {
  Manifest m;
  m.batch = {1, 64};
  m.models = {{"model", {1, 64}, "throughput", std::nullopt, std::nullopt, {}, {}},
              {"small", {1, 8}, "latency", std::nullopt, std::nullopt, {}, {}},
              {"b4", {4, 4}, "latency", std::nullopt, std::nullopt, {}, {}},
              {"also_b4", {4, 4}, "latency", std::nullopt, std::nullopt, {}, {}}};
  EXPECT_EQ(m.model_for(1)->name, "small");
  EXPECT_EQ(m.model_for(4)->name, "b4");
  EXPECT_EQ(m.model_for(9)->name, "model");
  EXPECT_EQ(m.model_for(65), nullptr);
  EXPECT_EQ(m.model_for(0), nullptr);
  EXPECT_EQ(m.describe_models(), "'model' 1..64, 'small' 1..8, 'b4' 4, 'also_b4' 4");
}

TEST(Dispatch, EveryModelIsListedAndLoaded) {
  const Policy policy(multi());
  const auto& models = policy.manifest().models;
  ASSERT_EQ(models.size(), 3u);
  EXPECT_EQ(models[0].name, "model");
  EXPECT_EQ(models[0].tuning, "throughput");
  EXPECT_EQ(policy.manifest().model_for(1)->name, "b1");
  EXPECT_EQ(policy.manifest().model_for(4)->name, "b4");
  EXPECT_EQ(policy.manifest().model_for(5)->name, "model");
  // Round trip: the models are written back.
  EXPECT_EQ(Manifest::from_json(policy.manifest().to_json(), "again").models.size(), 3u);
}

// Batches on both sides of every specialised size, against the one-model throughput package.
TEST(Dispatch, MatchesTheThroughputModelOnBothSidesOfEachSpecialisedSize) {
  const Policy policy(multi());
  const Policy reference(test::package_path("tutorial_throughput.pt2"));
  for (int64_t batch : {1, 2, 3, 4, 5, 64}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const auto inputs = test::random_inputs(policy.manifest(), batch);
    const auto want = reference.run_positional(inputs);
    expect_close(policy.run_positional(inputs), want);
    const TensorMap keyed = policy.run(test::keyed(policy.manifest().inputs, inputs));
    expect_close({keyed.at("loc"), keyed.at("scale"), keyed.at("sample")}, want);
  }
}

// The dispatch really reaches the specialised model: its results are bit-identical to that model
// loaded alone (same library, same kernels), and differ from nothing else in shape.
TEST(Dispatch, RunsEachBatchOnItsModel) {
  const Policy policy(multi());
  for (const auto& [model, batch] : std::vector<std::pair<std::string, int64_t>>{
           {"b1", 1}, {"b4", 4}, {"model", 2}, {"model", 5}, {"model", 64}}) {
    SCOPED_TRACE(model + " at batch " + std::to_string(batch));
    const Policy alone = load_only(multi(), model);
    const auto inputs = test::random_inputs(policy.manifest(), batch);
    expect_equal(policy.run_positional(inputs), alone.run_positional(inputs));
  }
}

TEST(Dispatch, SessionsStepOnTheModelForTheirBatch) {
  const std::string path = test::package_path("recurrent.pt2");
  const Policy policy(path);
  const Policy b1 = load_only(path, "b1");
  const Policy dynamic = load_only(path, "model");
  for (int64_t batch : {1, 3}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    Session session(policy, batch);
    Session reference(dynamic, batch);
    std::optional<Session> same_model;
    if (batch == 1) same_model.emplace(b1, batch);
    for (int step = 0; step < 3; ++step) {
      const at::Tensor observation = at::randn({batch, 3});
      const auto got = session.step_positional({observation});
      expect_close(got, reference.step_positional({observation}));
      if (same_model) expect_equal(got, same_model->step_positional({observation}));
    }
  }
}

TEST(Dispatch, APackageWithoutModelsListStillLoads) {
  // As packages were written before "models": one model, "model", and no "models" field.
  test::TempDir dir;
  const std::string one_model = dir.file("one_model.pt2");
  const std::string path = dir.file("old.pt2");
  test::rewrite_resealed(test::package_path("tutorial.pt2"), one_model,
                        [](const std::string& name, std::string&) {
                          return name.find("/aotinductor/b1/") == std::string::npos;
                        });
  test::rewrite_manifest(one_model, path, [](nlohmann::json& manifest) { manifest.erase("models"); });
  const Policy policy(path);
  ASSERT_EQ(policy.manifest().models.size(), 1u);
  EXPECT_EQ(policy.manifest().models[0].name, "model");
  EXPECT_EQ(policy.manifest().models[0].tuning, "");
  EXPECT_EQ(policy.manifest().models[0].batch.max, 64);
  EXPECT_FALSE(Contains(policy.manifest().to_json(), "\"models\""));
  for (int64_t batch : {1, 64}) {
    EXPECT_NO_THROW(policy.run_positional(test::random_inputs(policy.manifest(), batch)));
  }
  const auto error = catch_error<BatchSizeError>(
      [&] { policy.run_positional(test::random_inputs(policy.manifest(), 65)); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "has batch size 65, but the package accepts batch sizes 1..64"));
  EXPECT_FALSE(Contains(error->what(), "models"));
}

TEST(DispatchErrors, ABatchOutsideTheRangeSaysWhatEachModelServes) {
  const Policy policy(multi());
  const auto error = catch_error<BatchSizeError>(
      [&] { policy.run_positional(test::random_inputs(policy.manifest(), 65)); });
  ASSERT_TRUE(error);
  EXPECT_EQ(error->key(), "observation");
  EXPECT_TRUE(Contains(error->what(),
                       "input 'observation' has batch size 65, but the package accepts batch "
                       "sizes 1..64 (models 'model' 1..64, 'b1' 1, 'b4' 4)"));
}

TEST(DispatchErrors, AModelLoadedAloneRefusesTheBatchesItDoesNotServe) {
  const Policy b1 = load_only(multi(), "b1");
  EXPECT_NO_THROW(b1.run_positional(test::random_inputs(b1.manifest(), 1)));
  const auto error = catch_error<BatchSizeError>(
      [&] { b1.run_positional(test::random_inputs(b1.manifest(), 2)); });
  ASSERT_TRUE(error);
  EXPECT_EQ(error->key(), "observation");
  EXPECT_TRUE(Contains(error->what(), "input 'observation' has batch size 2, which package '" +
                                          multi() + "' serves with a model that is not loaded "
                                                    "(loaded: 'b1', by PolicyOptions::model_name)"));
  EXPECT_TRUE(Contains(error->what(), "its models: 'model' 1..64, 'b1' 1, 'b4' 4"));
}

// batch_sizes() (PolicyBase, the lite runtime's too) lists what the loaded models serve.
TEST(Dispatch, BatchSizesAreThoseOfTheLoadedModels) {
  std::vector<int64_t> all;
  for (int64_t b = 1; b <= 64; ++b) all.push_back(b);
  EXPECT_EQ(Policy(multi()).batch_sizes(), all);
  EXPECT_EQ(load_only(multi(), "b4").batch_sizes(), (std::vector<int64_t>{4}));
}

TEST(DispatchErrors, AModelNameThePackageLacksIsRefused) {
  const auto error = catch_error<PackageError>([&] { load_only(multi(), "b2"); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "package '" + multi() + "' has no model 'b2' (models: "
                                      "'model' 1..64, 'b1' 1, 'b4' 4)"));
}

TEST(DispatchErrors, AListedModelMissingFromTheArchiveIsRefused) {
  test::TempDir dir;
  const std::string path = dir.file("listed.pt2");
  test::rewrite_manifest(multi(), path, [](nlohmann::json& manifest) {
    manifest["models"].push_back({{"name", "b2"}, {"batch", {{"min", 2}, {"max", 2}}},
                                  {"tuning", "latency"}});
  });
  const auto error = catch_error<PackageError>([&] { Policy policy(path); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(),
                       "is not a .pt2 package with an AOTInductor model 'b2' (models in it: b1, "
                       "b4, model)"));
}

TEST(DispatchErrors, AModelTheManifestDoesNotListIsRefused) {
  test::TempDir dir;
  const std::string path = dir.file("unlisted.pt2");
  test::rewrite_manifest(multi(), path, [](nlohmann::json& manifest) {
    manifest["models"].erase(2);  // b4
  });
  const auto error = catch_error<ManifestError>([&] { Policy policy(path); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(),
                       "holds an AOTInductor model 'b4' that its manifest does not list (models: "
                       "'model' 1..64, 'b1' 1)"));
  EXPECT_TRUE(catch_error<ManifestError>([&] { read_manifest(path); }));
}

TEST(DispatchErrors, AModelCarryingAnotherManifestIsRefused) {
  test::TempDir dir;
  const std::string path = dir.file("mixed.pt2");
  test::rewrite_package(multi(), path, [](const std::string& name, std::string& bytes) {
    if (name.find("/aotinductor/b4/") != std::string::npos &&
        name.find("wrapper_metadata.json") != std::string::npos) {
      nlohmann::json metadata = nlohmann::json::parse(bytes);
      nlohmann::json manifest =
          nlohmann::json::parse(metadata.at(kManifestMetadataKey).get<std::string>());
      manifest["tdaot_version"] = "9.9.9";
      metadata[kManifestMetadataKey] = manifest.dump();
      bytes = metadata.dump();
    }
    return true;
  });
  const auto error = catch_error<ManifestError>([&] { Policy policy(path); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "model 'b4' carries another manifest than model 'model'"));
}

TEST(DispatchErrors, ABrokenSpecialisedModelIsNamedWhenLoading) {
  test::TempDir dir;
  const std::string path = dir.file("broken_b4.pt2");
  test::rewrite_resealed(multi(), path, [](const std::string& name, std::string& bytes) {
    if (name.find("/aotinductor/b4/") != std::string::npos &&
        name.size() > 3 && name.substr(name.size() - 3) == ".so") {
      bytes.resize(64);
    }
    return true;
  });
  const auto error = catch_error<PackageError>([&] { Policy policy(path); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "could not be loaded by AOTInductor: model 'b4': "));
}

}  // namespace
}  // namespace tdaot
