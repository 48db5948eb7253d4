// tdaot::lite::Binding and Policy on the fixture packages, mirroring the full runtime's Binding
// and Session tests (test_binding.cpp, test_session.cpp, test_concurrency.cpp): the outputs are
// the full runtime's (lite_expected.json: the same compiled models run by tdaot.runtime's bound
// run or Session, written by build_test_packages.py) and the eager policy's within tolerance;
// recurrent carry, reset and reset(mask); the envelope; every refusal names what is at fault.
// No torch anywhere in this executable. (Package checks: test_lite_packages.cpp; allocations:
// test_lite_zero_allocations.cpp.)
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "lite_support.h"
#include "tdaot/errors.h"
#include "tdaot/lite.h"

namespace tdaot {
namespace {

using lite_test::catch_error;
using lite_test::Contains;
using nlohmann::json;

std::string pkg(const std::string& name) { return lite_test::package_path(name); }

const TensorSpec& spec_of(const std::vector<TensorSpec>& specs, const std::string& key) {
  for (const TensorSpec& spec : specs) {
    if (spec.key == key) return spec;
  }
  throw std::runtime_error("no spec '" + key + "'");
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Writes the flat list `values` into the binding's input `key`.
void write_input(lite::Binding& b, const Manifest& m, const std::string& key, const json& values) {
  const TensorSpec& spec = spec_of(m.inputs, key);
  ASSERT_EQ(static_cast<int64_t>(values.size()), numel(b.input_shape(key))) << key;
  void* data = b.input_data(key, spec.dtype);
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  for (size_t i = 0; i < values.size(); ++i) {
    // null stands for NaN (JSON has none).
    const double value = values[i].is_null() ? kNaN : values[i].get<double>();
    switch (spec.dtype) {
      case DType::Float32: static_cast<float*>(data)[i] = static_cast<float>(value); break;
      case DType::Float64: static_cast<double*>(data)[i] = value; break;
      case DType::Int64: static_cast<int64_t*>(data)[i] = values[i].get<int64_t>(); break;
      case DType::Bool: static_cast<bool*>(data)[i] = values[i].get<bool>(); break;
      default: FAIL() << key << ": dtype " << dtype_name(spec.dtype) << " not handled here";
    }
  }
}

// The binding's output `key` as doubles.
std::vector<double> read_output(const lite::Binding& b, const Manifest& m, const std::string& key) {
  const TensorSpec& spec = spec_of(m.outputs, key);
  const void* data = b.output_data(key, spec.dtype);
  std::vector<double> values(static_cast<size_t>(numel(b.output_shape(key))));
  for (size_t i = 0; i < values.size(); ++i) {
    switch (spec.dtype) {
      case DType::Float32: values[i] = static_cast<const float*>(data)[i]; break;
      case DType::Float64: values[i] = static_cast<const double*>(data)[i]; break;
      case DType::Int64: values[i] = static_cast<double>(static_cast<const int64_t*>(data)[i]); break;
      case DType::Bool: values[i] = static_cast<const bool*>(data)[i] ? 1.0 : 0.0; break;
      default: ADD_FAILURE() << key << ": dtype " << dtype_name(spec.dtype) << " not handled here";
    }
  }
  return values;
}

// Every output equal to `want` (exactly: the same compiled model), or within 1e-5 (eager).
void expect_outputs(const lite::Binding& b, const Manifest& m, const json& want, double tolerance,
                    const std::string& what) {
  ASSERT_EQ(want.size(), m.outputs.size()) << what;
  for (const TensorSpec& spec : m.outputs) {
    const std::vector<double> got = read_output(b, m, spec.key);
    const json& expected = want.at(spec.key);
    ASSERT_EQ(got.size(), expected.size()) << what << " " << spec.key;
    for (size_t i = 0; i < got.size(); ++i) {
      if (expected[i].is_null()) {  // NaN
        EXPECT_TRUE(std::isnan(got[i])) << what << " " << spec.key << "[" << i << "]: " << got[i];
        continue;
      }
      const double e = expected[i].get<double>();
      if (tolerance == 0) {
        EXPECT_EQ(got[i], e) << what << " " << spec.key << "[" << i << "]";
      } else {
        EXPECT_NEAR(got[i], e, tolerance * (1 + std::abs(e))) << what << " " << spec.key << "["
                                                             << i << "]";
      }
    }
  }
}

// Steps `b` through a lite_expected.json case: resets, inputs, run, outputs.
void replay(lite::Binding& b, const Manifest& m, const json& c) {
  int step = 0;
  for (const json& s : c.at("steps")) {
    const std::string what = "step " + std::to_string(step++);
    if (s.at("reset").is_boolean()) {
      b.reset();
    } else if (s.at("reset").is_array()) {
      b.reset(s.at("reset").get<std::vector<bool>>());
    }
    for (const auto& [key, values] : s.at("inputs").items()) write_input(b, m, key, values);
    b.run();
    expect_outputs(b, m, s.at("outputs"), 0.0, what + " (full runtime)");
    if (s.contains("eager")) expect_outputs(b, m, s.at("eager"), 1e-5, what + " (eager)");
    if (s.contains("interventions")) {
      EXPECT_EQ(b.interventions().nonfinite, s["interventions"]["nonfinite"].get<int64_t>()) << what;
      EXPECT_EQ(b.interventions().rate_limited, s["interventions"]["rate_limited"].get<int64_t>())
          << what;
    }
  }
}

// ---- outputs ----

class LiteOutputs : public ::testing::TestWithParam<std::string> {};

TEST_P(LiteOutputs, EqualTheFullRuntimeAndEager) {
  const json& c = lite_test::expected().at(GetParam());
  const lite::Policy policy(pkg(c.at("package")));
  lite::BindOptions options;
  options.envelope = c.at("envelope").get<bool>();
  lite::Binding b = policy.bind(c.at("batch").get<int64_t>(), options);
  EXPECT_EQ(b.batch(), c.at("batch").get<int64_t>());
  EXPECT_EQ(b.model(), "b" + std::to_string(b.batch()));
  replay(b, policy.manifest(), c);
}

INSTANTIATE_TEST_SUITE_P(Cases, LiteOutputs,
                         ::testing::Values("tutorial_b1", "nested_b1", "tutorial_b14_b4",
                                           "legged_b1", "recurrent_b14_b4", "legged_envelope"));

TEST(LitePolicy, ServesTheLiteModelsBatchSizes) {
  const lite::Policy tutorial(pkg("tutorial.pt2"));
  EXPECT_EQ(tutorial.batch_sizes(), (std::vector<int64_t>{1}));
  EXPECT_EQ(tutorial.path(), pkg("tutorial.pt2"));
  EXPECT_EQ(tutorial.sha256().size(), 64u);
  EXPECT_FALSE(tutorial.contract());
  const lite::Policy b14(pkg("tutorial_b14.pt2"));
  EXPECT_EQ(b14.batch_sizes(), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(b14.bind(1).model(), "b1");
  EXPECT_EQ(b14.bind(4).model(), "b4");
  const lite::Policy legged(pkg("legged.pt2"));
  ASSERT_TRUE(legged.contract());
  EXPECT_DOUBLE_EQ(legged.contract()->control_dt, 0.02);
  EXPECT_EQ(&*legged.contract(), &*legged.manifest().contract);
}

TEST(LiteBinding, ShapesAreTheBatchThenTheManifestsShape) {
  const lite::Policy nested(pkg("nested.pt2"));
  lite::Binding b = nested.bind(1);
  EXPECT_EQ(b.input_shape("agents.observation"), (std::vector<int64_t>{1, 2, 5}));
  EXPECT_EQ(b.input_shape("robot.joints"), (std::vector<int64_t>{1, 7}));
  EXPECT_EQ(b.output_shape("agents.action"), (std::vector<int64_t>{1, 2, 2}));
  EXPECT_EQ(b.output_shape("robot.command"), (std::vector<int64_t>{1, 7}));
  const lite::Policy b14(pkg("tutorial_b14.pt2"));
  lite::Binding b4 = b14.bind(4);
  EXPECT_EQ(b4.input_shape("observation"), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(b4.output_shape("loc"), (std::vector<int64_t>{4, 2}));
}

TEST(LiteBinding, InputsAndOutputsListEveryBufferInManifestOrder) {
  const lite::Policy nested(pkg("nested.pt2"));
  lite::Binding b = nested.bind(1);
  ASSERT_EQ(b.inputs().size(), 2u);
  ASSERT_EQ(b.outputs().size(), 2u);
  EXPECT_EQ(b.inputs()[0].key, "agents.observation");
  EXPECT_EQ(b.inputs()[1].key, "robot.joints");
  EXPECT_EQ(b.outputs()[1].key, "robot.command");
  for (const lite::BoundBuffer& buffer : b.inputs()) {
    EXPECT_EQ(buffer.shape, b.input_shape(buffer.key)) << buffer.key;
    EXPECT_EQ(buffer.data, b.input_data(buffer.key, buffer.dtype)) << buffer.key;
    EXPECT_EQ(buffer.bytes, static_cast<size_t>(numel(buffer.shape)) * element_size(buffer.dtype));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data) % 64, 0u) << buffer.key;
  }
  for (const lite::BoundBuffer& buffer : b.outputs()) {
    EXPECT_EQ(buffer.shape, b.output_shape(buffer.key)) << buffer.key;
    EXPECT_EQ(buffer.data, b.output_data(buffer.key, buffer.dtype)) << buffer.key;
  }
}

TEST(LiteBinding, InputsAndOutputsAreTheBindingsOwnMemory) {
  const lite::Policy policy(pkg("tutorial_b14.pt2"));
  lite::Binding b = policy.bind(4);
  float* observation = b.input<float>("observation");
  const float* loc = b.output<float>("loc");
  // Zeroed when bound.
  for (int i = 0; i < 12; ++i) EXPECT_EQ(observation[i], 0.0f);
  for (int i = 0; i < 12; ++i) observation[i] = 0.1f * static_cast<float>(i);
  b.run();
  EXPECT_EQ(b.input<float>("observation"), observation);
  EXPECT_EQ(b.output<float>("loc"), loc);
  EXPECT_EQ(observation[5], 0.5f);  // the run leaves the inputs alone
  // Another binding has its own memory, and the same results for the same inputs.
  lite::Binding other = policy.bind(4);
  EXPECT_NE(other.input<float>("observation"), observation);
  std::memcpy(other.input<float>("observation"), observation, 12 * sizeof(float));
  other.run();
  EXPECT_EQ(std::memcmp(other.output<float>("loc"), loc, 8 * sizeof(float)), 0);
}

TEST(LiteBinding, OutlivesItsPolicy) {
  const json& c = lite_test::expected().at("tutorial_b1");
  std::optional<lite::Policy> policy(std::in_place, pkg("tutorial.pt2"));
  const Manifest manifest = policy->manifest();
  lite::Binding b = policy->bind(1);
  policy.reset();
  replay(b, manifest, c);
}

TEST(LiteBinding, MovedFromObjectsAreRefused) {
  lite::Policy policy(pkg("tutorial.pt2"));
  lite::Binding b = policy.bind(1);
  lite::Binding moved = std::move(b);
  const std::string binding_message =
      "this tdaot::lite::Binding was moved from; use the Binding it was moved to";
  for (const auto& call : std::vector<std::function<void()>>{
           [&] { b.run(); }, [&] { b.input<float>("observation"); }, [&] { b.batch(); },
           [&] { b.reset(); }, [&] { b.interventions(); }, [&] { b.output_shape("loc"); }}) {
    const auto error = catch_error<Error>(call);
    ASSERT_TRUE(error);
    EXPECT_EQ(std::string(error->what()), binding_message);
  }
  moved.run();  // the moved-to binding works

  lite::Policy other = std::move(policy);
  const std::string policy_message =
      "this tdaot::lite::Policy was moved from; use the Policy it was moved to";
  for (const auto& call : std::vector<std::function<void()>>{
           [&] { policy.bind(1); }, [&] { policy.manifest(); }, [&] { policy.batch_sizes(); },
           [&] { policy.contract(); }, [&] { policy.sha256(); }}) {
    const auto error = catch_error<Error>(call);
    ASSERT_TRUE(error);
    EXPECT_EQ(std::string(error->what()), policy_message);
  }
  EXPECT_EQ(other.bind(1).model(), "b1");
}

// ---- recurrent: a bound session ----

// State zero and is_init true at first; each run carries next.hidden into hidden and clears
// is_init; reset(mask) does that for the masked rows only, reset() for every row: exactly what
// the full runtime's Session and Binding do (their outputs: LiteOutputs' recurrent case).
TEST(LiteRecurrent, CarryResetAndResetMask) {
  const lite::Policy policy(pkg("recurrent_b14.pt2"));
  lite::Binding b = policy.bind(4);
  float* observation = b.input<float>("observation");
  const float* hidden = b.input<float>("hidden");
  const bool* is_init = b.input<bool>("is_init");
  const float* next = b.output<float>("next.hidden");
  ASSERT_EQ(b.input_shape("hidden"), (std::vector<int64_t>{4, 8}));
  ASSERT_EQ(b.input_shape("is_init"), (std::vector<int64_t>{4, 1}));
  for (int row = 0; row < 4; ++row) {
    EXPECT_TRUE(is_init[row]) << row;
    for (int i = 0; i < 8; ++i) EXPECT_EQ(hidden[row * 8 + i], 0.0f);
  }
  for (int i = 0; i < 12; ++i) observation[i] = 0.3f * static_cast<float>(i % 5) - 0.4f;
  for (int step = 0; step < 2; ++step) {
    b.run();
    EXPECT_EQ(std::memcmp(hidden, next, 32 * sizeof(float)), 0) << "carried at step " << step;
    for (int row = 0; row < 4; ++row) EXPECT_FALSE(is_init[row]) << "cleared at step " << step;
  }
  std::vector<float> before(hidden, hidden + 32);
  b.reset({true, false, true, false});
  for (int row = 0; row < 4; ++row) {
    const bool masked = row % 2 == 0;
    EXPECT_EQ(is_init[row], masked) << row;
    bool zero = true;
    bool kept = true;
    for (int i = 0; i < 8; ++i) {
      zero = zero && hidden[row * 8 + i] == 0.0f;
      kept = kept && hidden[row * 8 + i] == before[static_cast<size_t>(row * 8 + i)];
    }
    if (masked) {
      EXPECT_TRUE(zero) << "row " << row << " reset";
    } else {
      EXPECT_TRUE(kept) << "row " << row << " kept";
      EXPECT_FALSE(zero) << "row " << row << " had a state to keep";
    }
  }
  // A reset row's step equals a fresh binding's first step on the same row.
  b.run();
  lite::Binding fresh = policy.bind(4);
  std::memcpy(fresh.input<float>("observation"), observation, 12 * sizeof(float));
  fresh.run();
  const float* action = b.output<float>("action");
  const float* fresh_action = fresh.output<float>("action");
  EXPECT_EQ(std::memcmp(action, fresh_action, 2 * sizeof(float)), 0) << "row 0";
  EXPECT_EQ(std::memcmp(action + 4, fresh_action + 4, 2 * sizeof(float)), 0) << "row 2";
  EXPECT_NE(std::memcmp(action + 2, fresh_action + 2, 2 * sizeof(float)), 0) << "row 1 kept its state";
  b.reset();
  for (int row = 0; row < 4; ++row) EXPECT_TRUE(is_init[row]) << row;
  for (int i = 0; i < 32; ++i) EXPECT_EQ(hidden[i], 0.0f) << i;
  b.run();
  EXPECT_EQ(std::memcmp(b.output<float>("action"), fresh_action, 8 * sizeof(float)), 0);
}

TEST(LiteRecurrent, IsInitWrittenByTheCallerMarksRowsForOneRun) {
  const lite::Policy policy(pkg("recurrent_b14.pt2"));
  lite::Binding b = policy.bind(4);
  b.run();
  bool* is_init = b.input<bool>("is_init");
  is_init[1] = true;
  b.run();
  for (int row = 0; row < 4; ++row) EXPECT_FALSE(is_init[row]) << "cleared, row " << row;
}

TEST(LiteRecurrent, ResetNeedsARecurrentPackageAndAMaskOfOneBoolPerRow) {
  const lite::Policy tutorial(pkg("tutorial.pt2"));
  lite::Binding b = tutorial.bind(1);
  for (const auto& call : std::vector<std::function<void()>>{[&] { b.reset(); },
                                                             [&] { b.reset({true}); }}) {
    const auto error = catch_error<Error>(call);
    ASSERT_TRUE(error);
    EXPECT_TRUE(Contains(error->what(), "package '" + pkg("tutorial.pt2") + "' is not recurrent"));
    EXPECT_TRUE(Contains(error->what(), "has no envelope"));
  }
  // With the envelope there is something to forget: its previous outputs.
  lite::Binding enveloped = tutorial.bind(1, lite::BindOptions{true});
  EXPECT_NO_THROW(enveloped.reset());
  EXPECT_NO_THROW(enveloped.reset({true}));
  const lite::Policy recurrent(pkg("recurrent_b14.pt2"));
  lite::Binding r = recurrent.bind(4);
  for (const std::vector<bool>& mask : {std::vector<bool>{true, false, true}, std::vector<bool>{},
                                        std::vector<bool>(5, true)}) {
    const auto error = catch_error<ShapeError>([&] { r.reset(mask); });
    ASSERT_TRUE(error);
    EXPECT_TRUE(Contains(error->what(), "the reset mask has " + std::to_string(mask.size()) +
                                            " values, but the binding has 4 rows (one bool per "
                                            "row)"));
  }
  // Refused masks changed nothing.
  r.run();
  const bool* is_init = r.input<bool>("is_init");
  for (int row = 0; row < 4; ++row) EXPECT_FALSE(is_init[row]);
}

// ---- refusals ----

TEST(LiteErrors, AnUnknownKeyIsNamedWithTheKeysThereAre) {
  const lite::Policy policy(pkg("nested.pt2"));
  lite::Binding b = policy.bind(1);
  const auto input = catch_error<UnknownKeyError>([&] { b.input<float>("robot.camera"); });
  ASSERT_TRUE(input);
  EXPECT_EQ(input->key(), "robot.camera");
  EXPECT_TRUE(Contains(input->what(), "unknown input key 'robot.camera'; the binding's inputs: "
                                      "'agents.observation', 'robot.joints'"));
  const auto output = catch_error<UnknownKeyError>([&] { b.output<float>("robot.joints"); });
  ASSERT_TRUE(output);
  EXPECT_EQ(output->key(), "robot.joints");
  EXPECT_TRUE(Contains(output->what(), "unknown output key 'robot.joints'; the binding's outputs: "
                                       "'agents.action', 'robot.command'"));
  EXPECT_TRUE(catch_error<UnknownKeyError>([&] { b.input_shape("robot.command"); }));
  EXPECT_TRUE(catch_error<UnknownKeyError>([&] { b.output_shape("agents.observation"); }));
  EXPECT_TRUE(catch_error<UnknownKeyError>([&] { b.input_data("", DType::Float32); }));
  // A misspelling is named with the key it most likely means, as on the full runtime.
  const auto misspelt = catch_error<UnknownKeyError>([&] { b.input<float>("robot.joint"); });
  ASSERT_TRUE(misspelt);
  EXPECT_TRUE(Contains(misspelt->what(), "unknown input key 'robot.joint' (did you mean 'robot.joints'?)"));
}

TEST(LiteErrors, AWrongDtypeNamesTheKeyAndBothDtypes) {
  const lite::Policy policy(pkg("recurrent_b14.pt2"));
  lite::Binding b = policy.bind(1);
  const auto input = catch_error<DtypeError>([&] { b.input<double>("observation"); });
  ASSERT_TRUE(input);
  EXPECT_EQ(input->key(), "observation");
  EXPECT_TRUE(Contains(input->what(), "input 'observation' has dtype float32, not float64"));
  const auto flags = catch_error<DtypeError>([&] { b.input<float>("is_init"); });
  ASSERT_TRUE(flags);
  EXPECT_TRUE(Contains(flags->what(), "input 'is_init' has dtype bool, not float32"));
  const auto output = catch_error<DtypeError>([&] { b.output<int64_t>("action"); });
  ASSERT_TRUE(output);
  EXPECT_EQ(output->key(), "action");
  EXPECT_TRUE(Contains(output->what(), "output 'action' has dtype float32, not int64"));
}

TEST(LiteErrors, ABatchNoLiteModelServesNamesTheServedSizes) {
  const lite::Policy tutorial(pkg("tutorial.pt2"));
  for (int64_t batch : {0, 2, 64, 65}) {
    const auto error = catch_error<BatchSizeError>([&] { tutorial.bind(batch); });
    ASSERT_TRUE(error);
    EXPECT_TRUE(Contains(error->what(), "package '" + pkg("tutorial.pt2") +
                                            "' has no lite model for batch size " +
                                            std::to_string(batch) +
                                            "; the lite runtime serves batch sizes 1 (models: "));
  }
  const lite::Policy b14(pkg("tutorial_b14.pt2"));
  const auto error = catch_error<BatchSizeError>([&] { b14.bind(3); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "the lite runtime serves batch sizes 1, 4"));
}

// ---- the envelope ----

// The options struct is the full runtime's (tdaot/bind_options.h): its CUDA graph is refused.
TEST(LiteEnvelope, ACudaGraphIsRefused) {
  const lite::Policy policy(pkg("legged.pt2"));
  lite::BindOptions options;
  options.cuda_graph = true;
  const auto error = catch_error<InvalidArgumentError>([&] { policy.bind(1, options); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "the lite runtime runs CPU models only"));
}

TEST(LiteEnvelope, OffByDefault) {
  const lite::Policy policy(pkg("legged.pt2"));
  lite::Binding b = policy.bind(1);
  b.input<float>("observation")[0] = std::numeric_limits<float>::quiet_NaN();
  b.run();
  EXPECT_EQ(b.interventions().nonfinite, 0);
  EXPECT_EQ(b.interventions().rate_limited, 0);
}

// NaN: the previous outputs come back, counted; max_delta: each action element moves at most
// 0.2 from the previous run's, not on the first run or the first after a reset.
TEST(LiteEnvelope, NonfiniteAndRateLimit) {
  const lite::Policy policy(pkg("legged.pt2"));
  ASSERT_TRUE(policy.contract());
  lite::BindOptions options;
  options.envelope = true;
  lite::Binding b = policy.bind(1, options);
  float* observation = b.input<float>("observation");
  const float* action = b.output<float>("action");
  const auto fill = [&](float value) {
    for (int i = 0; i < 48; ++i) observation[i] = value * static_cast<float>((i % 7) - 3);
  };
  fill(0.1f);
  b.run();
  const std::vector<float> first(action, action + 12);
  fill(30.0f);
  b.run();
  EXPECT_EQ(b.interventions().rate_limited, 1);
  bool moved_by_max = false;
  for (int i = 0; i < 12; ++i) {
    const double delta = std::abs(static_cast<double>(action[i]) - first[static_cast<size_t>(i)]);
    EXPECT_LE(delta, 0.2 + 1e-6) << i;
    moved_by_max = moved_by_max || delta > 0.2 - 1e-6;
  }
  EXPECT_TRUE(moved_by_max);
  const std::vector<float> second(action, action + 12);
  observation[5] = std::numeric_limits<float>::infinity();
  b.run();
  EXPECT_EQ(b.interventions().nonfinite, 1);
  EXPECT_EQ(std::memcmp(action, second.data(), 12 * sizeof(float)), 0);
  // The next finite run is limited against the last good outputs.
  observation[5] = 30.0f * static_cast<float>((5 % 7) - 3);
  b.run();
  EXPECT_EQ(b.interventions().nonfinite, 1);
  for (int i = 0; i < 12; ++i) {
    EXPECT_LE(std::abs(static_cast<double>(action[i]) - second[static_cast<size_t>(i)]), 0.2 + 1e-6);
  }
}

// A non-finite run of a guarded recurrent binding: the previous outputs, the state not carried.
TEST(LiteEnvelope, ANonfiniteRunCarriesNoState) {
  // recurrent_b14 has no contract: the envelope only guards against non-finite values there.
  const lite::Policy policy(pkg("recurrent_b14.pt2"));
  lite::BindOptions options;
  options.envelope = true;
  lite::Binding b = policy.bind(4, options);
  float* observation = b.input<float>("observation");
  for (int i = 0; i < 12; ++i) observation[i] = 0.5f;
  b.run();
  const std::vector<float> hidden(b.input<float>("hidden"), b.input<float>("hidden") + 32);
  const std::vector<float> action(b.output<float>("action"), b.output<float>("action") + 8);
  observation[7] = std::numeric_limits<float>::quiet_NaN();
  b.run();
  EXPECT_EQ(b.interventions().nonfinite, 1);
  // The state is not carried on a non-finite run, and the outputs are the previous ones.
  EXPECT_EQ(std::memcmp(b.input<float>("hidden"), hidden.data(), 32 * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(b.output<float>("action"), action.data(), 8 * sizeof(float)), 0);
  b.reset({false, true, false, false});
  observation[7] = 0.5f;
  b.run();
  EXPECT_EQ(b.interventions().nonfinite, 1);
}

// ---- one thread at a time ----

// Two threads run one binding: sooner or later one finds the other inside run() and is refused
// with InvalidArgumentError (a caller's misuse; a tdaot::Error) and the one-thread message;
// nothing else fails and the binding still computes the right outputs afterwards.
TEST(LiteConcurrency, ASecondThreadIsRefused) {
  const json& c = lite_test::expected().at("tutorial_b1");
  const lite::Policy policy(pkg("tutorial.pt2"));
  lite::Binding b = policy.bind(1);
  const std::string message =
      "tdaot::lite::Binding used from two threads at once: a binding is for one thread; bind one "
      "per thread (bindings may share one Policy)";
  std::atomic<bool> go{false};
  std::atomic<bool> refused{false};
  std::atomic<int> other_errors{0};
  std::string other_error;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  const auto hammer = [&] {
    while (!go.load()) std::this_thread::yield();
    while (!refused.load() && std::chrono::steady_clock::now() < deadline) {
      for (int i = 0; i < 100; ++i) {
        try {
          b.run();
        } catch (const Error& e) {
          if (typeid(e) == typeid(InvalidArgumentError) && e.what() == message) {
            refused = true;
          } else if (other_errors++ == 0) {
            other_error = lite_test::type_name(typeid(e)) + ": " + e.what();
          }
        }
      }
    }
  };
  std::thread first(hammer);
  std::thread second(hammer);
  go = true;
  first.join();
  second.join();
  EXPECT_TRUE(refused) << "no run was refused in 30 s of two threads running one binding";
  EXPECT_EQ(other_errors.load(), 0) << other_error;
  replay(b, policy.manifest(), c);
}

// Bindings of one Policy are independent: threads bind their own (at the same time) and each
// steps through the expected outputs, many times over.
TEST(LiteConcurrency, ThreadsWithTheirOwnBindingsOfOnePolicy) {
  const lite::Policy policy(pkg("recurrent_b14.pt2"));
  const json& c = lite_test::expected().at("recurrent_b14_b4");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      lite::Binding b = policy.bind(4);
      for (int round = 0; round < 20; ++round) {
        b.reset();
        replay(b, policy.manifest(), c);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
}

TEST(LiteConcurrency, ResetWhileRunningIsRefused) {
  const lite::Policy policy(pkg("recurrent_b14.pt2"));
  lite::Binding b = policy.bind(4);
  std::atomic<bool> stop{false};
  std::thread runner([&] {
    while (!stop.load()) {
      try {
        b.run();
      } catch (const Error&) {
      }
    }
  });
  bool refused = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!refused && std::chrono::steady_clock::now() < deadline) {
    try {
      b.reset({true, false, false, true});
    } catch (const Error& e) {
      refused = Contains(e.what(), "tdaot::lite::Binding used from two threads at once");
    }
  }
  stop = true;
  runner.join();
  EXPECT_TRUE(refused);
}

// The supervisor of the joint targets on the lite runtime: the same code as the full runtime's
// (core/run/supervisor), given at bind (legged.pt2's contract has none).
TEST(LiteSupervisor, TargetsAreClippedAndTheStateIsReadable) {
  const lite::Policy legged(lite_test::package_path("legged.pt2"));
  lite::BindOptions options;
  Supervisor limits;
  limits.low = {{-0.1}, false};
  limits.high = {{0.1}, false};
  options.supervisor.config = limits;
  lite::Binding b = legged.bind(1, options);
  ASSERT_TRUE(b.supervised());
  float* observation = b.input<float>("observation");
  for (int i = 0; i < 48; ++i) observation[i] = 3.0f;
  b.run();
  const float* action = b.output<float>("action");
  for (int j = 0; j < 12; ++j) EXPECT_LE(std::abs(action[j]), 0.1f + 1e-6f) << j;
  EXPECT_EQ(b.supervisor().mode, SupervisorMode::running);
  EXPECT_EQ(b.interventions().clipped, 1);
  observation[0] = std::numeric_limits<float>::quiet_NaN();
  b.run();
  EXPECT_EQ(b.supervisor().mode, SupervisorMode::held);
  for (int j = 0; j < 12; ++j) EXPECT_TRUE(std::isfinite(action[j])) << j;
  b.reset();
  EXPECT_EQ(b.supervisor().mode, SupervisorMode::running);

  options.supervisor.enabled = false;
  lite::Binding bare = legged.bind(1, options);
  EXPECT_FALSE(bare.supervised());
  const auto none = catch_error<InvalidArgumentError>([&] { bare.supervisor(); });
  ASSERT_TRUE(none);
  EXPECT_TRUE(Contains(none->what(), "has no supervisor"));
  options.supervisor.enabled = true;
  options.supervisor.config->max_velocity = {{1.0}, false};
  const auto refused = catch_error<ContractError>([&] { legged.bind(1, options); });
  ASSERT_TRUE(refused);
  EXPECT_TRUE(Contains(refused->what(), "contract supervisor: field 'max_velocity': reads the measured joint "
                                        "velocities, but no input signal has a joint_vel_rel term of 'action'"));
}

}  // namespace
}  // namespace tdaot
