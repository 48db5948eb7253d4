// Heap allocations per call in steady state: what tdaot adds on top of AOTInductor. The counts
// are printed (they go into the README); the assertions are that tdaot's own code adds nothing
// on the positional paths, whatever AOTInductor itself allocates. (The allocation-free bound
// run is counted at malloc level by test_zero_allocations.cpp.)
#include <ATen/ATen.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <gtest/gtest.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <functional>
#include <iostream>

#include "tdaot/torch/policy.h"
#include "tdaot/torch/session.h"
#include "test_support.h"

namespace tdaot {
namespace {

struct PerCall {
  size_t news = 0;
  size_t tensors = 0;
};

// Allocations of one call of `call`, after warm-up calls; the minimum over a few calls, so a
// one-off (a lazily grown cache) does not count as steady state.
PerCall measure(const std::function<void()>& call) {
  for (int i = 0; i < 20; ++i) call();
  PerCall best{SIZE_MAX, SIZE_MAX};
  for (int i = 0; i < 20; ++i) {
    test::AllocationCounter counter;
    call();
    best.news = std::min(best.news, counter.count());
    best.tensors = std::min(best.tensors, counter.tensor_count());
  }
  return best;
}

void report(const char* what, const PerCall& n) {
  std::cout << "[allocations] " << what << ": " << n.news << " operator new, " << n.tensors
            << " tensor storages per call\n";
}

// The dynamic model runs through AOTInductor's runner: at a batch no latency model serves,
// tdaot's validation and dispatch add nothing to what AOTInductor allocates.
TEST(Allocations, RunPositionalAddsNothingToAoti) {
  for (const char* name : {"tutorial.pt2", "nested.pt2"}) {
    SCOPED_TRACE(name);
    const std::string path = test::package_path(name);
    const Policy policy(path);
    torch::inductor::AOTIModelPackageLoader raw(path, "model");
    for (const int64_t batch : {int64_t{1}, int64_t{2}}) {
      SCOPED_TRACE("batch " + std::to_string(batch));
      const std::string what = std::string(name) + " batch " + std::to_string(batch) + " ";
      const std::vector<at::Tensor> inputs = test::random_inputs(policy.manifest(), batch);
      const PerCall aoti = measure([&] { raw.run(inputs); });
      // tdaot runs the model below the autograd dispatch keys (policy.cpp), which saves the
      // autograd bookkeeping of AOTInductor's own calls; compared under the same guard, tdaot's
      // validation and bookkeeping must add nothing.
      const PerCall aoti_guarded = measure([&] {
        const at::AutoDispatchBelowADInplaceOrView below_autograd;
        raw.run(inputs);
      });
      const PerCall ours = measure([&] { policy.run_positional(inputs); });
      report((what + "AOTIModelPackageLoader::run (model 'model')").c_str(), aoti);
      report((what + "AOTIModelPackageLoader::run below autograd").c_str(), aoti_guarded);
      report((what + "Policy::run_positional").c_str(), ours);
      EXPECT_LE(ours.news, aoti.news);
      if (batch == 1) {
        // Batch 1 runs on the latency model's plain C entry point (arrayref.h): tdaot allocates
        // the output tensors and their bookkeeping, less than AOTInductor's runner does.
        EXPECT_LE(ours.news, aoti_guarded.news);
        EXPECT_EQ(ours.tensors, policy.manifest().outputs.size());
      } else {
        EXPECT_EQ(ours.news, aoti_guarded.news);
        EXPECT_EQ(ours.tensors, aoti_guarded.tensors);
      }
      // AOTInductor allocates at least the outputs it returns (and its intermediate buffers).
      EXPECT_GE(aoti.tensors, policy.manifest().outputs.size());
    }
  }
}

TEST(Allocations, SessionStepAddsNothingToRunPositional) {
  const Policy policy(test::package_path("recurrent.pt2"));
  Session session(policy, 1);
  const at::Tensor observation = at::randn({1, 3});
  const std::vector<at::Tensor> given = {observation};
  const std::vector<at::Tensor> all = {observation, at::zeros({1, 8}),
                                       at::zeros({1, 1}, at::kBool)};
  const PerCall run = measure([&] { policy.run_positional(all); });
  const PerCall step = measure([&] { session.step_positional(given); });
  report("recurrent.pt2 Policy::run_positional", run);
  report("recurrent.pt2 Session::step_positional", step);
  EXPECT_EQ(step.news, run.news);
  EXPECT_EQ(step.tensors, run.tensors);
}

// The supervisor of the joint targets (given at construction: limits that clip every target and
// a hold after 2 rate-limited steps) adds nothing to a Session's step.
TEST(Allocations, ASupervisedSessionStepAddsNothing) {
  const Policy policy(test::package_path("legged.pt2"));
  SupervisorOptions supervised;
  Supervisor limits;
  limits.low = {{-0.1}, false};
  limits.high = {{0.1}, false};
  limits.max_rate_limited_steps = 2;
  supervised.config = limits;
  Session plain(policy, 1);
  Session session(policy, 1, supervised);
  const std::vector<at::Tensor> given = {at::randn({1, 48}) * 50};
  const PerCall bare = measure([&] { plain.step_positional(given); });
  const PerCall step = measure([&] { session.step_positional(given); });
  report("legged.pt2 Session::step_positional", bare);
  report("legged.pt2 supervised Session::step_positional", step);
  EXPECT_GT(session.interventions().clipped, 0);
  EXPECT_EQ(step.news, bare.news);
  EXPECT_EQ(step.tensors, bare.tensors);
}

}  // namespace
}  // namespace tdaot
