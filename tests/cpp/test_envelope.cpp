// The safety envelope's one implementation (core/run/buffer_envelope.h), which both runtimes
// run, on hand-made manifests: float16 outputs are rate limited and held like float32 ones (the
// full runtime's tensor envelope limited them before it became a view of this one), and the
// full runtime's tensor adapter (runtime/envelope.h) gives what the core gives.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "core/run/buffer_envelope.h"
#include "runtime/envelope.h"
#include "tdaot/errors.h"
#include "tdaot/manifest.h"

namespace tdaot {
namespace {

// One input "x" and one output "y" of two elements a row, `dtype`; y rests at 0.5 and moves
// at most 0.25 per run.
Manifest two_element_manifest(DType dtype) {
  Manifest manifest;
  manifest.inputs.push_back(TensorSpec{"x", dtype, {2}});
  manifest.outputs.push_back(TensorSpec{"y", dtype, {2}});
  Contract contract;
  Signal signal;
  signal.offset = SignalValues{{0.5}, false};
  signal.max_delta = SignalValues{{0.25}, false};
  contract.outputs.emplace("y", signal);
  manifest.contract = contract;
  return manifest;
}

constexpr uint16_t kHalfQuarter = 0x3400;  // 0.25
constexpr uint16_t kHalfHalf = 0x3800;     // 0.5
constexpr uint16_t kHalfOne = 0x3C00;      // 1.0
constexpr uint16_t kHalfOneAndQuarter = 0x3D00;
constexpr uint16_t kHalfTwo = 0x4000;
constexpr uint16_t kHalfNaN = 0x7E00;

TEST(BufferEnvelope, Float16OutputsAreRateLimitedAndHeld) {
  detail::BufferEnvelope envelope(two_element_manifest(DType::Float16), 1);
  std::vector<uint16_t> x{0, 0};
  std::vector<uint16_t> y{kHalfOne, kHalfQuarter};
  const std::vector<const void*> in{x.data()};
  const std::vector<void*> out{y.data()};
  // The first run of a row is not limited.
  EXPECT_TRUE(envelope.guard(in, out));
  EXPECT_EQ(y, (std::vector<uint16_t>{kHalfOne, kHalfQuarter}));
  // 1.0 -> 2.0 moves 0.25 at most; 0.25 -> 0.5 is within it.
  y = {kHalfTwo, kHalfHalf};
  EXPECT_TRUE(envelope.guard(in, out));
  EXPECT_EQ(y, (std::vector<uint16_t>{kHalfOneAndQuarter, kHalfHalf}));
  EXPECT_EQ(envelope.interventions().rate_limited, 1);
  // A NaN input holds the previous outputs.
  x[1] = kHalfNaN;
  y = {0, 0};
  EXPECT_FALSE(envelope.guard(in, out));
  EXPECT_EQ(y, (std::vector<uint16_t>{kHalfOneAndQuarter, kHalfHalf}));
  EXPECT_EQ(envelope.interventions().nonfinite, 1);
  // After a reset the held outputs are the contract's rest value, 0.5.
  envelope.reset();
  EXPECT_FALSE(envelope.guard(in, out));
  EXPECT_EQ(y, (std::vector<uint16_t>{kHalfHalf, kHalfHalf}));
}

TEST(BufferEnvelope, Float16SubnormalsAndLargeValuesRoundTrip) {
  // Limits of 6e-8 (a subnormal step) from 0 and of 0.25 around 60000 (near float16's max).
  Manifest manifest = two_element_manifest(DType::Float16);
  manifest.contract->outputs.at("y").offset = SignalValues{{0.0}, false};
  manifest.contract->outputs.at("y").max_delta = SignalValues{{5.96046448e-08, 32.0}, true};
  detail::BufferEnvelope envelope(manifest, 1);
  std::vector<uint16_t> x{0, 0};
  std::vector<uint16_t> y{0x0000, 0x7B53};  // 0, 60000
  const std::vector<const void*> in{x.data()};
  const std::vector<void*> out{y.data()};
  EXPECT_TRUE(envelope.guard(in, out));
  y = {kHalfOne, 0x7BFF};  // 1.0, 65504 (float16's largest)
  EXPECT_TRUE(envelope.guard(in, out));
  // 2^-24, the smallest subnormal; 60000 + 32 = 60032, a float16 (steps of 32 there).
  EXPECT_EQ(y, (std::vector<uint16_t>{0x0001, 0x7B54}));
}

TEST(Envelope, TheTensorAdapterGivesWhatTheCoreGives) {
  const Manifest manifest = two_element_manifest(DType::Float32);
  detail::Envelope envelope(manifest, 2);
  std::vector<at::Tensor> inputs{at::zeros({2, 2})};
  std::vector<at::Tensor> outputs{at::ones({2, 2})};
  EXPECT_TRUE(envelope.guard(inputs, outputs));
  outputs[0] = at::full({2, 2}, 3.0);
  EXPECT_TRUE(envelope.guard(inputs, outputs));
  EXPECT_TRUE(at::equal(outputs[0], at::full({2, 2}, 1.25)));
  // A reset of row 1 only: row 1 moves freely, row 0 is limited again.
  envelope.reset(std::vector<bool>{false, true});
  outputs[0] = at::full({2, 2}, 3.0);
  EXPECT_TRUE(envelope.guard(inputs, outputs));
  EXPECT_TRUE(at::equal(outputs[0][0], at::full({2}, 1.5)));
  EXPECT_TRUE(at::equal(outputs[0][1], at::full({2}, 3.0)));
  EXPECT_EQ(envelope.interventions().rate_limited, 2);
  inputs[0][0][0] = std::numeric_limits<float>::infinity();
  outputs[0] = at::zeros({2, 2});
  EXPECT_FALSE(envelope.guard(inputs, outputs));
  EXPECT_TRUE(at::equal(outputs[0][1], at::full({2}, 3.0)));
  EXPECT_EQ(envelope.interventions().nonfinite, 1);
}

TEST(InternalError, IsATdaotErrorNamedInternal) {
  try {
    throw InternalError("an invariant");
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "internal: an invariant");
    EXPECT_NE(dynamic_cast<const InternalError*>(&e), nullptr);
  }
}

}  // namespace
}  // namespace tdaot
