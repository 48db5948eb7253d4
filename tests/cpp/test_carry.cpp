// The recurrent carry every runner shares (core/run/carry.h): state zero and is_init marked at
// creation and after a reset, only in the reset rows for a masked one; after a step that counts
// the state outputs go into the state inputs and is_init is cleared in every row, a mark the
// caller wrote included. On raw host memory (HostBuffers, the lite Binding's) and on at::Tensor
// (TensorBuffers, the full runtime's Session and Binding). The runners against each other:
// test_binding.cpp (Binding vs Session) and lite/test_lite.cpp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/run/carry.h"
#include "runtime/carry_buffers.h"
#include "tdaot/manifest.h"

namespace tdaot {
namespace {

constexpr int64_t kBatch = 3;

// obs float [2], hidden float [2], is_init bool [1] -> action float [1], next.hidden float [2].
Manifest recurrent_manifest() {
  Manifest m;
  m.inputs = {{"obs", DType::Float32, {2}}, {"hidden", DType::Float32, {2}},
              {"is_init", DType::Bool, {1}}};
  m.outputs = {{"action", DType::Float32, {1}}, {"next.hidden", DType::Float32, {2}}};
  m.recurrent = Recurrent{{{"hidden", "next.hidden"}}, "is_init"};
  return m;
}

// The host memory of one runner: every input and output [kBatch, *shape], zeroed.
struct Host {
  std::vector<float> obs = std::vector<float>(kBatch * 2, 0.f);
  std::vector<float> hidden = std::vector<float>(kBatch * 2, 0.f);
  bool is_init[kBatch] = {};
  std::vector<float> action = std::vector<float>(kBatch, 0.f);
  std::vector<float> next_hidden = std::vector<float>(kBatch * 2, 0.f);
  detail::HostBuffers buffers{{obs.data(), hidden.data(), is_init},
                              {obs.size() * sizeof(float), hidden.size() * sizeof(float), kBatch},
                              {action.data(), next_hidden.data()},
                              kBatch};
};

TEST(Carry, ReadsTheStateAndIsInitFromTheManifest) {
  const detail::Carry carry(recurrent_manifest());
  ASSERT_EQ(carry.state().size(), 1u);
  EXPECT_EQ(carry.state()[0].input, 1u);
  EXPECT_EQ(carry.state()[0].output, 1u);
  EXPECT_EQ(carry.is_init(), 2u);
  EXPECT_FALSE(carry.carried(0));
  EXPECT_TRUE(carry.carried(1));
  EXPECT_TRUE(carry.carried(2));
  // A package without a recurrent section carries nothing; its steps touch no input.
  Manifest plain = recurrent_manifest();
  plain.recurrent.reset();
  const detail::Carry none(plain);
  EXPECT_TRUE(none.state().empty());
  EXPECT_FALSE(none.is_init().has_value());
  Host host;
  host.next_hidden.assign(host.next_hidden.size(), 5.f);
  host.is_init[1] = true;
  none.after_step(host.buffers);
  EXPECT_EQ(host.hidden, std::vector<float>(kBatch * 2, 0.f));
  EXPECT_TRUE(host.is_init[1]);
}

TEST(Carry, AStepCarriesTheStateAndClearsEveryMarkTheCallersToo) {
  const detail::Carry carry(recurrent_manifest());
  Host host;
  carry.reset(host.buffers);  // as at creation
  for (bool flag : host.is_init) EXPECT_TRUE(flag);
  for (size_t i = 0; i < host.next_hidden.size(); ++i) host.next_hidden[i] = 1.f + i;
  carry.after_step(host.buffers);
  EXPECT_EQ(host.hidden, host.next_hidden);
  for (bool flag : host.is_init) EXPECT_FALSE(flag);
  // A mark the caller writes itself (a torchrl rollout's is_init) is for one step as well.
  host.is_init[2] = true;
  carry.after_step(host.buffers);
  EXPECT_FALSE(host.is_init[2]);
  // Outputs and the other inputs are the runner's: never written.
  EXPECT_EQ(host.obs, std::vector<float>(kBatch * 2, 0.f));
  EXPECT_EQ(host.action, std::vector<float>(kBatch, 0.f));
}

TEST(Carry, AMaskedResetTouchesOnlyItsRows) {
  const detail::Carry carry(recurrent_manifest());
  Host host;
  host.hidden.assign(host.hidden.size(), 7.f);
  const std::vector<bool> rows{false, true, false};
  host.buffers.set_rows(rows);
  carry.reset_rows(host.buffers);
  EXPECT_EQ(host.hidden, (std::vector<float>{7.f, 7.f, 0.f, 0.f, 7.f, 7.f}));
  EXPECT_FALSE(host.is_init[0]);
  EXPECT_TRUE(host.is_init[1]);
  EXPECT_FALSE(host.is_init[2]);
  carry.reset(host.buffers);
  EXPECT_EQ(host.hidden, std::vector<float>(kBatch * 2, 0.f));
  for (bool flag : host.is_init) EXPECT_TRUE(flag);
}

// The same rules on tensors; a runner's output need not be contiguous.
TEST(Carry, TensorBuffersFollowTheSameRules) {
  const detail::Carry carry(recurrent_manifest());
  std::vector<at::Tensor> inputs{at::zeros({kBatch, 2}), at::full({kBatch, 2}, 7.f),
                                 at::zeros({kBatch, 1}, at::kBool)};
  {
    detail::TensorBuffers buffers(inputs);
    const at::Tensor mask = at::tensor({1, 0, 1}).to(at::kBool);
    buffers.set_rows(mask);
    carry.reset_rows(buffers);
  }
  EXPECT_TRUE(at::equal(inputs[1], at::tensor({0.f, 0.f, 7.f, 7.f, 0.f, 0.f}).view({kBatch, 2})));
  EXPECT_TRUE(at::equal(inputs[2], at::tensor({1, 0, 1}).to(at::kBool).view({kBatch, 1})));
  const at::Tensor transposed = at::arange(6, at::kFloat).view({2, kBatch}).t();
  ASSERT_FALSE(transposed.is_contiguous());
  const std::vector<at::Tensor> outputs{at::zeros({kBatch, 1}), transposed};
  detail::TensorBuffers buffers(inputs, outputs);
  carry.after_step(buffers);
  EXPECT_TRUE(at::equal(inputs[1], transposed));
  EXPECT_FALSE(inputs[2].any().item<bool>());
  carry.reset(buffers);
  EXPECT_TRUE(inputs[1].eq(0).all().item<bool>());
  EXPECT_TRUE(inputs[2].all().item<bool>());
}

}  // namespace
}  // namespace tdaot
