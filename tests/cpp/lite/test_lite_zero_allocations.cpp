// The lite bound run allocates nothing: every malloc-family call of the process is counted
// (malloc_counter.h) over N calls of lite::Binding::run after warm-up and must be zero, for every
// fixture package's lite models (the recurrent ones as a bound session, the legged one with its
// envelope on steps alternately rate limited and non-finite), reset(mask) too, each also recorded
// by the flight recorder (BindOptions::record, and its dump_fd), and the runs
// after a weight swap. The p50 is printed (for the README; not asserted).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "lite_support.h"
#include "../malloc_counter.h"
#include "tdaot/lite.h"

namespace tdaot {
namespace {

constexpr int kCalls = 2000;

uint64_t allocations_over(int calls, const std::function<void()>& call) {
  const uint64_t before = test::malloc_calls();
  for (int i = 0; i < calls; ++i) call();
  return test::malloc_calls() - before;
}

double p50_us(const std::function<void()>& call) {
  std::vector<double> us(kCalls);
  for (double& sample : us) {
    const auto start = std::chrono::steady_clock::now();
    call();
    sample = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  }
  std::nth_element(us.begin(), us.begin() + kCalls / 2, us.end());
  return us[kCalls / 2];
}

// Allocations of kCalls calls after warm-up (must be 0), printed with the p50.
void expect_allocation_free(const std::string& what, const std::function<void()>& call) {
  for (int i = 0; i < 200; ++i) call();
  const uint64_t allocations = allocations_over(kCalls, call);
  std::printf("[lite allocations] %-44s %d calls: %llu mallocs; p50 %.2f us\n", what.c_str(), kCalls,
              static_cast<unsigned long long>(allocations), p50_us(call));
  EXPECT_EQ(allocations, 0u) << what;
}

struct Case {
  std::string package;
  int64_t batch;
};

class LiteZeroAllocations : public ::testing::TestWithParam<Case> {};

TEST_P(LiteZeroAllocations, BoundRunAllocatesNothingPerCall) {
  if (!test::malloc_counting()) GTEST_SKIP() << "malloc is not counted under a sanitizer";
  const Case& c = GetParam();
  const lite::Policy policy(lite_test::package_path(c.package));
  // The counter counts: binding allocates its buffers.
  EXPECT_GT(allocations_over(1, [&] { policy.bind(c.batch); }), 0u);
  lite::Binding b = policy.bind(c.batch);
  for (const TensorSpec& spec : policy.manifest().inputs) {
    if (spec.dtype != DType::Float32) continue;
    float* data = b.input<float>(spec.key);
    int64_t n = 1;
    for (int64_t d : b.input_shape(spec.key)) n *= d;
    for (int64_t i = 0; i < n; ++i) data[i] = 0.01f * static_cast<float>(i % 17) - 0.08f;
  }
  expect_allocation_free(c.package + " batch " + std::to_string(c.batch) + " run", [&] { b.run(); });
}

INSTANTIATE_TEST_SUITE_P(Packages, LiteZeroAllocations,
                         ::testing::Values(Case{"tutorial.pt2", 1}, Case{"nested.pt2", 1},
                                           Case{"recurrent.pt2", 1}, Case{"tutorial_b14.pt2", 1},
                                           Case{"tutorial_b14.pt2", 4}, Case{"legged.pt2", 1},
                                           Case{"recurrent_b14.pt2", 4}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.package.substr(0, info.param.package.find('.')) +
                                  "_batch" + std::to_string(info.param.batch);
                         });

// The envelope's guard and limit, and reset(mask), allocate nothing either; nor does the flight
// recorder (BindOptions::record) recording them, nor its dump_fd (async-signal-safe: write(2)
// only), here to /dev/null.
TEST(LiteZeroAllocationsEnvelope, GuardLimitAndResetAllocateNothing) {
  if (!test::malloc_counting()) GTEST_SKIP() << "malloc is not counted under a sanitizer";
  for (int64_t record : {0, 64}) {
    const std::string recorded = record ? " recorded" : "";
    const lite::Policy legged(lite_test::package_path("legged.pt2"));
    lite::BindOptions options;
    options.envelope = true;
    options.record = record;
    lite::Binding b = legged.bind(1, options);
    float* observation = b.input<float>("observation");
    int64_t step = 0;
    expect_allocation_free("legged.pt2 envelope run (limited, NaN)" + recorded, [&] {
      const float value = (step % 3 == 2) ? std::numeric_limits<float>::quiet_NaN()
                                          : (step % 2 == 0 ? 30.0f : -30.0f);
      for (int i = 0; i < 48; ++i) observation[i] = value;
      ++step;
      b.run();
    });
    EXPECT_GT(b.interventions().rate_limited, 0);
    EXPECT_GT(b.interventions().nonfinite, 0);

    const lite::Policy recurrent(lite_test::package_path("recurrent_b14.pt2"));
    lite::Binding r = recurrent.bind(4, options);
    const std::vector<bool> mask{true, false, false, true};
    expect_allocation_free("recurrent_b14.pt2 reset(mask) + run" + recorded, [&] {
      r.reset(mask);
      r.run();
    });
    if (record == 0) continue;
    FILE* null = std::fopen("/dev/null", "wb");
    ASSERT_NE(null, nullptr);
    const uint64_t before = test::malloc_calls();
    EXPECT_EQ(r.dump_fd(fileno(null)), 0);
    EXPECT_EQ(test::malloc_calls() - before, 0u) << "dump_fd";
    std::fclose(null);
  }
}

// The supervisor of the joint targets given at bind (limits that clip, a hold after 3
// rate-limited steps or on a NaN), its state read and a reset each 10 runs, allocates nothing.
TEST(LiteZeroAllocationsSupervisor, TheSupervisedRunAllocatesNothing) {
  if (!test::malloc_counting()) GTEST_SKIP() << "malloc is not counted under a sanitizer";
  const lite::Policy legged(lite_test::package_path("legged.pt2"));
  lite::BindOptions options;
  options.envelope = true;
  Supervisor config;
  config.low = {{-0.5}, false};
  config.high = {{0.5}, false};
  config.max_rate_limited_steps = 3;
  options.supervisor.config = config;
  lite::Binding b = legged.bind(1, options);
  float* observation = b.input<float>("observation");
  int64_t step = 0;
  double scale = 0.0;
  expect_allocation_free("legged.pt2 supervised run (clipped, held, reset)", [&] {
    ++step;
    const float value = step % 7 == 0 ? std::numeric_limits<float>::quiet_NaN()
                                      : (step % 2 == 0 ? 30.0f : -30.0f);
    for (int i = 0; i < 48; ++i) observation[i] = value;
    b.run();
    scale += b.supervisor().gain_scale;
    if (step % 10 == 0) b.reset();
  });
  EXPECT_GT(b.interventions().clipped, 0);
  EXPECT_GT(b.interventions().fallback, 0);
  EXPECT_GT(scale, 0.0);
}

// After a weight swap (and a rollback) the bound run allocates nothing again: only the run that
// first sees new weights gives the model instance its new constants, which allocates.
TEST(LiteZeroAllocationsSwap, RunsAfterASwapOrARollbackAllocateNothing) {
  if (!test::malloc_counting()) GTEST_SKIP() << "malloc is not counted under a sanitizer";
  const lite::Policy policy(lite_test::package_path("tutorial.pt2"));
  lite::Binding b = policy.bind(1);
  b.run();
  policy.swap_weights(lite_test::package_path("tutorial_v2.tdw"));
  EXPECT_GT(allocations_over(1, [&] { b.run(); }), 0u) << "the first run after the swap";
  expect_allocation_free("tutorial.pt2 b1 after a weight swap", [&] { b.run(); });
  policy.rollback_weights();
  expect_allocation_free("tutorial.pt2 b1 after a rollback", [&] { b.run(); });
}

}  // namespace
}  // namespace tdaot
