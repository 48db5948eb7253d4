// The bad-input matrix: every input of the fixture packages (tutorial, nested, recurrent) is
// broken in every way the manifest can describe (missing or unknown key, each other manifest
// dtype, rank, per-sample size, batch 0 and above the range, non-contiguous, negated view,
// sparse/mkldnn layout, device, undefined) through the keyed and the positional path of a
// Policy and of a Session. Each refusal must be the exact InputError subclass naming the key,
// and the same loaded policy (or session) must still give the reference result afterwards.
// NaN and inf are data, not errors: they go through and stay in their rows; a Session holds such
// a step instead (its safety envelope).
//
// The cases are generated from the loaded manifests, so the matrix is data: one test per
// package and path, each looping over its cases (ctest runs every TEST in its own process,
// so one TEST per case would pay a package load per case).
//
// The cases themselves are generated in test_bad_inputs_cases.cpp.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "tdaot/errors.h"
#include "tdaot/torch/policy.h"
#include "tdaot/torch/session.h"
#include "test_support.h"

namespace tdaot {
namespace {

using test::all_equal;
using test::in_order;
using test::keyed;
using test::valid_inputs;
using test::bad_inputs::BadCase;
using test::bad_inputs::cases_for;
using test::bad_inputs::expect_refused;
using test::bad_inputs::kBatch;
using test::bad_inputs::Target;
using test::bad_inputs::type;

// ---- Policy::run and Policy::run_positional ----

class BadInputs : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    policy_ = std::make_unique<Policy>(test::package_path(GetParam() + ".pt2"));
    good_ = valid_inputs(policy_->manifest().inputs, kBatch);
    reference_ = policy_->run_positional(good_);
    for (auto& tensor : reference_) tensor = tensor.clone();
  }

  const Policy& policy() const { return *policy_; }
  const Manifest& manifest() const { return policy_->manifest(); }
  Target target() const { return {manifest().inputs, manifest().batch}; }

  // After every refusal: the same policy still returns the reference, on both paths.
  void expect_still_right(const std::string& after) {
    EXPECT_TRUE(all_equal(policy().run_positional(good_), reference_)) << "after " << after;
    EXPECT_TRUE(
        all_equal(in_order(manifest(), policy().run(keyed(manifest().inputs, good_))), reference_))
        << "after " << after;
  }

  // Runs every case of the matrix through `path` ("keyed" or "positional").
  void run_matrix(bool keyed_path) {
    size_t count = 0;
    size_t tried = 0;
    for (size_t index = 0; index < manifest().inputs.size(); ++index) {
      for (const BadCase& bad : cases_for(target(), index)) {
        if (!keyed_path && !bad.edit) continue;  // missing/unknown keys exist only by key
        SCOPED_TRACE(manifest().inputs[index].key + ": " + bad.name);
        std::vector<at::Tensor> inputs = good_;
        TensorMap map;
        if (bad.edit) bad.edit(inputs);
        map = keyed(manifest().inputs, inputs);
        if (bad.edit_keyed) bad.edit_keyed(map);
        ++tried;
        const bool refused = keyed_path
                                 ? expect_refused(bad, [&] { policy().run(map); })
                                 : expect_refused(bad, [&] { policy().run_positional(inputs); });
        if (!refused) continue;
        expect_still_right(bad.name);
        ++count;
      }
    }
    // Every case was refused, and the matrix is not small by accident (9 dtypes, 5 shapes,
    // 2 batches, 4+ layouts, device, undefined per input).
    EXPECT_EQ(count, tried);
    EXPECT_GE(count, manifest().inputs.size() * 21);
  }

  std::unique_ptr<Policy> policy_;
  std::vector<at::Tensor> good_;
  std::vector<at::Tensor> reference_;
};

TEST_P(BadInputs, KeyedPathRefusesEachCaseNamingTheKey) { run_matrix(true); }

TEST_P(BadInputs, PositionalPathRefusesEachCaseNamingTheKey) { run_matrix(false); }

TEST_P(BadInputs, CudaInputIsADeviceError) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device on this host";
  for (size_t index = 0; index < manifest().inputs.size(); ++index) {
    std::vector<at::Tensor> inputs = good_;
    inputs[index] = inputs[index].to(at::kCUDA);
    const std::string& key = manifest().inputs[index].key;
    const BadCase bad{"cuda",  nullptr,
                      nullptr, type<DeviceError>(),
                      key,     {"input '" + key + "' is on device cuda", "built for device cpu"}};
    EXPECT_TRUE(expect_refused(bad, [&] { policy().run_positional(inputs); }));
    EXPECT_TRUE(expect_refused(bad, [&] { policy().run(keyed(manifest().inputs, inputs)); }));
    expect_still_right("cuda");
  }
}

// NaN and inf are data: the call succeeds, the other rows are exactly what they were, and a
// NaN row makes some output of its row NaN (the fixtures propagate it through every path,
// given is_init false so the recurrent state is read).
TEST_P(BadInputs, NanAndInfPassThroughRowByRow) {
  std::vector<at::Tensor> good = good_;
  for (size_t i = 0; i < good.size(); ++i) {
    if (manifest().inputs[i].dtype == at::kBool) good[i] = at::zeros_like(good[i]);
  }
  const auto reference = policy().run_positional(good);
  size_t checked = 0;
  for (size_t index = 0; index < good.size(); ++index) {
    if (!tdaot::is_floating(manifest().inputs[index].dtype)) continue;
    SCOPED_TRACE(manifest().inputs[index].key);
    std::vector<at::Tensor> inputs = good;
    inputs[index] = good[index].clone();
    inputs[index][0].fill_(std::numeric_limits<double>::quiet_NaN());
    inputs[index][1].fill_(std::numeric_limits<double>::infinity());
    inputs[index][2].fill_(-std::numeric_limits<double>::infinity());
    for (const bool keyed_path : {false, true}) {
      std::vector<at::Tensor> out;
      ASSERT_NO_THROW(
          out = keyed_path ? in_order(manifest(), policy().run(keyed(manifest().inputs, inputs)))
                           : policy().run_positional(inputs));
      bool nan_in_row0 = false;
      for (size_t k = 0; k < out.size(); ++k) {
        EXPECT_TRUE(at::equal(out[k][3], reference[k][3])) << "finite row of output " << k;
        if (at::isFloatingType(out[k].scalar_type())) {
          nan_in_row0 = nan_in_row0 || out[k][0].isnan().any().item<bool>();
        }
      }
      EXPECT_TRUE(nan_in_row0) << "a NaN input row gave no NaN output";
    }
    expect_still_right("NaN/inf");
    ++checked;
  }
  EXPECT_GT(checked, 0u);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BadInputs, ::testing::Values("tutorial", "nested", "recurrent"),
                         [](const auto& info) { return info.param; });

// ---- Session::step and Session::step_positional (recurrent) ----

class SessionBadInputs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    policy_ = std::make_unique<Policy>(test::package_path("recurrent.pt2"));
  }
  static void TearDownTestSuite() { policy_.reset(); }

  // A session and a twin that only ever gets the valid steps: after each refused step, the
  // session's state and next step must equal the twin's.
  void run_matrix(bool keyed_path) {
    Session session(*policy_, kBatch);
    Session twin(*policy_, kBatch);
    const auto& specs = session.inputs();
    const Target target{specs, policy_->manifest().batch, /*session=*/true};
    size_t count = 0;
    const auto step_both = [&](const std::string& after) {
      const auto given = valid_inputs(specs, kBatch);
      EXPECT_TRUE(all_equal(session.step_positional(given), twin.step_positional(given)))
          << "after " << after;
      EXPECT_TRUE(at::equal(session.state().at("hidden"), twin.state().at("hidden")))
          << "after " << after;
    };
    step_both("nothing");
    for (size_t index = 0; index < specs.size(); ++index) {
      for (const BadCase& bad : cases_for(target, index)) {
        if (!keyed_path && !bad.edit) continue;
        SCOPED_TRACE(specs[index].key + ": " + bad.name);
        std::vector<at::Tensor> inputs = valid_inputs(specs, kBatch);
        if (bad.edit) bad.edit(inputs);
        TensorMap map = keyed(specs, inputs);
        if (bad.edit_keyed) bad.edit_keyed(map);
        const bool refused = keyed_path
                                 ? expect_refused(bad, [&] { session.step(map); })
                                 : expect_refused(bad, [&] { session.step_positional(inputs); });
        EXPECT_TRUE(at::equal(session.state().at("hidden"), twin.state().at("hidden")))
            << "a refused step changed the state";
        if (!refused) continue;
        step_both(bad.name);
        ++count;
      }
    }
    EXPECT_GE(count, keyed_path ? 25u : 23u);  // observation: 9 dtypes, 5 shapes, 4 batches, ...
  }

  static inline std::unique_ptr<Policy> policy_;
};

TEST_F(SessionBadInputs, KeyedStepRefusesEachCaseAndKeepsTheState) { run_matrix(true); }

TEST_F(SessionBadInputs, PositionalStepRefusesEachCaseAndKeepsTheState) { run_matrix(false); }

// The safety envelope: a NaN observation in any row holds the whole step (the previous outputs,
// zeros before the first step: the package has no contract) and leaves the state as it was.
TEST_F(SessionBadInputs, ANanStepIsHeldAndLeavesTheStateAsItWas) {
  Session session(*policy_, kBatch);
  Session twin(*policy_, kBatch);
  at::Tensor poisoned = at::randn({kBatch, 3});
  poisoned[0][1] = std::numeric_limits<double>::quiet_NaN();
  for (const auto& [key, tensor] : session.step({{"observation", poisoned}})) {
    EXPECT_TRUE(at::equal(tensor, at::zeros_like(tensor))) << key;
  }
  std::vector<at::Tensor> previous;
  for (int step = 0; step < 2; ++step) {  // the state untouched: the two sessions step alike
    const at::Tensor observation = at::randn({kBatch, 3});
    previous = twin.step_positional({observation});
    EXPECT_TRUE(all_equal(session.step_positional({observation}), previous));
  }
  poisoned = at::randn({kBatch, 3});
  poisoned[kBatch - 1][2] = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(all_equal(session.step_positional({poisoned}), previous));
  EXPECT_EQ(session.interventions().nonfinite, 2);
  const at::Tensor observation = at::randn({kBatch, 3});
  EXPECT_TRUE(all_equal(session.step_positional({observation}), twin.step_positional({observation})));
}

}  // namespace
}  // namespace tdaot
