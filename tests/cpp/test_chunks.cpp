// A model whose manifest entry has "chunk_rows" runs a call of more rows as slices of at most
// that many, on every path (Policy, Session with its recurrent state, Binding): the outputs are
// those of the whole call. A manifest without the field (every package built before it) runs
// whole. The fixture packages are small, so the field is written into copies of them here.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tdaot/torch/binding.h"
#include "tdaot/torch/policy.h"
#include "tdaot/torch/session.h"
#include "test_support.h"

namespace tdaot {
namespace {

// A copy of fixture `name` whose model 'model' (batch 1..64) has chunk_rows `rows` and, when
// `min` > 1, serves batches from `min` (its 'b1' model still serves batch 1).
std::string chunked_copy(const test::TempDir& dir, const std::string& name, int64_t rows,
                         int64_t min = 1) {
  const std::string path = dir.file("chunked_" + name);
  test::rewrite_manifest(test::package_path(name), path, [&](nlohmann::json& manifest) {
    for (nlohmann::json& model : manifest["models"]) {
      if (model["name"] != "model") continue;
      model["chunk_rows"] = rows;
      model["batch"]["min"] = min;
    }
  });
  return path;
}

// Slices run the same kernels on fewer rows: MKL may sum in another order, so to tolerance.
void expect_close(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].sizes(), want[i].sizes()) << "output " << i;
    EXPECT_TRUE(at::allclose(got[i], want[i], 1e-5, 1e-6))
        << "output " << i << " differs by " << (got[i] - want[i]).abs().max().item<double>();
  }
}

TEST(Chunks, TheManifestRecordsChunkRowsAndARunInSlicesEqualsTheWholeCall) {
  test::TempDir dir;
  const Policy whole(test::package_path("tutorial.pt2"));
  const Policy sliced(chunked_copy(dir, "tutorial.pt2", 8));
  ASSERT_FALSE(whole.manifest().models[0].chunk_rows);  // built without: its largest row is small
  ASSERT_EQ(sliced.manifest().models[0].chunk_rows, 8);
  EXPECT_TRUE(test::Contains(sliced.manifest().to_json(), "\"chunk_rows\":8"));
  // 64: eight slices; 37: four and a remainder of 5; 8: one, whole; 9: 8 and 1.
  for (int64_t batch : {64, 37, 9, 8}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const std::vector<at::Tensor> inputs = test::random_inputs(whole.manifest(), batch);
    expect_close(sliced.run_positional(inputs), whole.run_positional(inputs));
    expect_close(test::in_order(sliced.manifest(), sliced.run(test::keyed(whole.manifest().inputs, inputs))),
                 whole.run_positional(inputs));
  }
}

// CPU tensor storages one call allocates (after a first call at that batch).
size_t tensors_per_call(const Policy& policy, const std::vector<at::Tensor>& inputs) {
  policy.run_positional(inputs);
  const test::AllocationCounter counter;
  policy.run_positional(inputs);
  return counter.tensor_count();
}

TEST(Chunks, EachSliceAllocatesOnlyItsOwnIntermediates) {
  // What slicing is for: every slice's intermediates are a slice's size, so a call of 64 rows
  // in slices of 8 allocates its (small) intermediates once per slice.
  test::TempDir dir;
  const Policy whole(test::package_path("tutorial.pt2"));
  const Policy sliced(chunked_copy(dir, "tutorial.pt2", 8));
  const std::vector<at::Tensor> inputs = test::random_inputs(whole.manifest(), 64);
  const size_t whole_tensors = tensors_per_call(whole, inputs);
  EXPECT_GE(tensors_per_call(sliced, inputs), 8 * whole_tensors) << whole_tensors << " tensors whole";
}

TEST(Chunks, ARemainderBelowTheModelsSmallestBatchJoinsTheSliceBeforeIt) {
  // 'model' serves 2..64 here: 17 rows in slices of 8 would leave 1, which it does not serve,
  // so they run as 8 + 9: two slices, as 16 rows do, where 24 rows take three.
  test::TempDir dir;
  const Policy whole(test::package_path("tutorial.pt2"));
  const Policy sliced(chunked_copy(dir, "tutorial.pt2", 8, 2));
  for (int64_t batch : {17, 18, 2}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const std::vector<at::Tensor> inputs = test::random_inputs(whole.manifest(), batch);
    expect_close(sliced.run_positional(inputs), whole.run_positional(inputs));
  }
  const auto tensors = [&](int64_t batch) {
    return tensors_per_call(sliced, test::random_inputs(whole.manifest(), batch));
  };
  EXPECT_EQ(tensors(17), tensors(16));
  EXPECT_GT(tensors(24), tensors(17));
}

TEST(Chunks, ARecurrentSessionCarriesItsStateThroughSlices) {
  // The state rows are inputs and outputs like any other: each slice carries its own rows.
  test::TempDir dir;
  const Policy whole(test::package_path("recurrent.pt2"));
  const Policy sliced(chunked_copy(dir, "recurrent.pt2", 4));
  Session a(whole, 10);
  Session b(sliced, 10);
  for (int step = 0; step < 4; ++step) {
    const at::Tensor observation = at::randn({10, 3});
    expect_close(b.step_positional({observation}), a.step_positional({observation}));
    if (step == 1) {
      const at::Tensor mask = at::arange(10) % 3 == 0;
      a.reset(mask);
      b.reset(mask);
    }
  }
  EXPECT_TRUE(at::allclose(b.state().at("hidden"), a.state().at("hidden"), 1e-5, 1e-6));
}

TEST(Chunks, ABindingRunsInSlicesIntoItsOwnOutputs) {
  test::TempDir dir;
  const Policy whole(test::package_path("tutorial.pt2"));
  const Policy sliced(chunked_copy(dir, "tutorial.pt2", 8));
  Binding binding = sliced.bind(20);
  const std::vector<at::Tensor> inputs = test::random_inputs(whole.manifest(), 20);
  for (size_t i = 0; i < inputs.size(); ++i) binding.inputs()[i].copy_(inputs[i]);
  binding.run();
  expect_close(binding.outputs(), whole.run_positional(inputs));
}

TEST(Chunks, AManifestWithoutTheFieldStillLoadsAndRunsWhole) {
  // As every package written before "chunk_rows": the field absent (or null) is no chunking.
  test::TempDir dir;
  for (const bool null_field : {false, true}) {
    const std::string path = dir.file(null_field ? "null.pt2" : "absent.pt2");
    test::rewrite_manifest(test::package_path("tutorial.pt2"), path, [&](nlohmann::json& manifest) {
      for (nlohmann::json& model : manifest["models"]) {
        model.erase("chunk_rows");
        if (null_field) model["chunk_rows"] = nullptr;
      }
    });
    const Policy policy(path);
    for (const ModelSpec& model : policy.manifest().models) EXPECT_FALSE(model.chunk_rows) << model.name;
    EXPECT_FALSE(test::Contains(policy.manifest().to_json(), "chunk_rows"));
    EXPECT_EQ(policy.run_positional(test::random_inputs(policy.manifest(), 64)).front().size(0), 64);
  }
}

}  // namespace
}  // namespace tdaot
