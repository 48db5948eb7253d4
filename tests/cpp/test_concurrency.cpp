// Threads: many callers sharing one Policy (good and bad calls mixed, on 1 and 4 runners), and
// the deterministic cases: a call held inside the compiled model while another thread calls
// (a second runner serves it, a single runner makes it wait, a Session and a Binding refuse it).
//
// A call is held inside the model by a CPU allocator that blocks the first tensor allocation
// of an armed thread: the compiled model allocates its outputs, so the thread stops there with
// its runner (and its session's busy flag) taken, until the test releases it.
#include <ATen/ATen.h>
#include <c10/util/Type.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

#include "tdaot/torch/binding.h"
#include "tdaot/errors.h"
#include "tdaot/torch/policy.h"
#include "tdaot/torch/session.h"
#include "test_support.h"

namespace tdaot {
namespace {

using namespace std::chrono_literals;

// ---- holding a call inside the model ----

thread_local bool armed = false;

class Gate {
 public:
  // Called by the armed thread: says it is inside, then waits for release() (at most 30 s, so a
  // broken test fails instead of hanging).
  void hold() {
    std::unique_lock<std::mutex> lock(mutex_);
    inside_ = true;
    changed_.notify_all();
    changed_.wait_for(lock, 30s, [&] { return released_; });
  }
  // Whether the armed thread got inside within `timeout`.
  bool wait_inside(std::chrono::milliseconds timeout = 10s) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return inside_; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    released_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool inside_ = false;
  bool released_ = false;
};

Gate* active_gate = nullptr;

// The allocation hook: blocks an armed thread's first tensor allocation.
void hold_if_armed() {
  if (!armed) return;
  armed = false;
  if (active_gate != nullptr) active_gate->hold();
}

// Runs `call` on a new thread that is held inside its first tensor allocation; the caller
// checks gate.wait_inside(), does its part, then gate.release() and get()s the result.
template <typename F>
auto start_held(Gate& gate, F call) {
  test::install_cpu_allocation_hook(&hold_if_armed);
  active_gate = &gate;
  return std::async(std::launch::async, [call] {
    armed = true;
    return call();
  });
}

// ---- shared inputs ----

using test::keyed;
using test::random_inputs;

bool all_equal(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!at::equal(got[i], want[i])) return false;
  }
  return true;
}

std::vector<at::Tensor> keyed_in_order(const Policy& policy, const std::vector<at::Tensor>& in) {
  const TensorMap out = policy.run(keyed(policy.manifest().inputs, in));
  std::vector<at::Tensor> ordered;
  for (const auto& spec : policy.manifest().outputs) ordered.push_back(out.at(spec.key));
  return ordered;
}

// ---- many threads, one Policy ----

// A call that must be refused: what to run and the error it must raise.
struct BadCall {
  std::function<void()> call;
  const std::type_info* error;
  std::string key;
};

// 8 threads x 500 calls on one nested.pt2 Policy. Each thread has three batch sizes of its own
// and cycles through positional, keyed and bad calls (both paths); every good result must
// equal the single-thread reference computed first, and every bad call must raise its error.
class ManyThreads : public ::testing::TestWithParam<int> {};

TEST_P(ManyThreads, EightThreadsMixingGoodAndBadCallsMatchTheReference) {
  PolicyOptions options;
  options.num_runners = GetParam();
  const Policy policy(test::package_path("nested.pt2"), options);
  const Manifest& manifest = policy.manifest();
  constexpr int kThreads = 8;
  constexpr int kCalls = 500;

  struct Work {
    std::vector<std::vector<at::Tensor>> inputs;     // three batch sizes
    std::vector<std::vector<at::Tensor>> reference;  // their single-thread outputs
    std::vector<BadCall> bad;
  };
  std::vector<Work> work(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (const int64_t batch : {int64_t{1} + t, int64_t{9} + 2 * t, int64_t{64} - t}) {
      work[t].inputs.push_back(random_inputs(manifest, batch));
      auto reference = policy.run_positional(work[t].inputs.back());
      for (auto& tensor : reference) tensor = tensor.clone();
      work[t].reference.push_back(std::move(reference));
    }
    const auto& good = work[t].inputs[0];
    const auto with = [good](size_t index, at::Tensor tensor) {
      auto inputs = good;
      inputs[index] = std::move(tensor);
      return inputs;
    };
    const auto positional = [&policy](std::vector<at::Tensor> inputs) {
      return [&policy, inputs] { policy.run_positional(inputs); };
    };
    const auto by_key = [&policy](TensorMap inputs) {
      return [&policy, inputs] { policy.run(inputs); };
    };
    const int64_t batch = good[0].size(0);
    TensorMap missing = keyed(manifest.inputs, good);
    missing.erase("robot.joints");
    TensorMap unknown = keyed(manifest.inputs, good);
    unknown.emplace("robot.velocity", good[1]);
    work[t].bad = {
        {positional(with(1, good[1].to(at::kDouble))), &typeid(DtypeError), "robot.joints"},
        {positional(with(0, at::zeros({0, 2, 5}))), &typeid(BatchSizeError), "agents.observation"},
        {positional(with(0, at::randn({batch, 5, 2}).transpose(1, 2))), &typeid(LayoutError),
         "agents.observation"},
        {positional(with(1, at::zeros({65, 7}))), &typeid(BatchSizeError), "robot.joints"},
        {by_key(missing), &typeid(MissingKeyError), "robot.joints"},
        {by_key(unknown), &typeid(UnknownKeyError), "robot.velocity"},
        {by_key(keyed(manifest.inputs,
                      with(1, at::empty({batch, 7}, at::TensorOptions().device(at::kMeta))))),
         &typeid(DeviceError), "robot.joints"},
        {by_key(keyed(manifest.inputs, with(0, at::zeros({batch, 3, 5})))), &typeid(ShapeError),
         "agents.observation"},
    };
  }

  std::vector<int> good_calls(kThreads, 0);
  std::vector<int> refused(kThreads, 0);
  std::vector<std::vector<std::string>> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const Work& w = work[t];
      for (int i = 0; i < kCalls; ++i) {
        const size_t variant = static_cast<size_t>(i % 3);
        const std::string call = "call " + std::to_string(i);
        try {
          switch (i % 6) {
            case 2:
            case 5: {
              const BadCall& bad = w.bad[static_cast<size_t>(i / 3) % w.bad.size()];
              try {
                bad.call();
                failures[t].push_back(call + ": a bad call was accepted");
              } catch (const InputError& e) {
                if (typeid(e) != *bad.error || e.key() != bad.key ||
                    std::string(e.what()).find("'" + bad.key + "'") == std::string::npos) {
                  failures[t].push_back(call + ": " + c10::demangle(typeid(e).name()) + " " +
                                        e.what());
                } else {
                  ++refused[t];
                }
              }
              break;
            }
            case 0:
            case 3:
              if (!all_equal(policy.run_positional(w.inputs[variant]), w.reference[variant])) {
                failures[t].push_back(call + ": positional result differs");
              }
              ++good_calls[t];
              break;
            default:
              if (!all_equal(keyed_in_order(policy, w.inputs[variant]), w.reference[variant])) {
                failures[t].push_back(call + ": keyed result differs");
              }
              ++good_calls[t];
          }
        } catch (const std::exception& e) {
          failures[t].push_back(call + ": " + e.what());
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(failures[t].size(), 0u) << "thread " << t << ": " << failures[t].front();
    EXPECT_EQ(good_calls[t] + refused[t], kCalls) << "thread " << t;
    EXPECT_GT(refused[t], kCalls / 4) << "thread " << t;
  }
  // The policy is unharmed.
  EXPECT_TRUE(all_equal(policy.run_positional(work[0].inputs[1]), work[0].reference[1]));
}

INSTANTIATE_TEST_SUITE_P(Runners, ManyThreads, ::testing::Values(1, 4),
                         [](const auto& info) { return std::to_string(info.param) + "runners"; });

// ---- one call held inside the model ----

TEST(HeldCall, ASecondRunnerServesAnotherThreadMeanwhile) {
  PolicyOptions options;
  options.num_runners = 2;
  const Policy policy(test::package_path("tutorial.pt2"), options);
  const auto held_in = random_inputs(policy.manifest(), 3);
  const auto other_in = random_inputs(policy.manifest(), 5);
  const auto held_want = policy.run_positional(held_in);
  const auto other_want = policy.run_positional(other_in);
  Gate gate;
  auto held = start_held(gate, [&] { return policy.run_positional(held_in); });
  ASSERT_TRUE(gate.wait_inside()) << "the held call never allocated";
  // Served by the second runner while the first is held.
  EXPECT_TRUE(all_equal(keyed_in_order(policy, other_in), other_want));
  EXPECT_TRUE(all_equal(policy.run_positional(other_in), other_want));
  gate.release();
  EXPECT_TRUE(all_equal(held.get(), held_want));
}

TEST(HeldCall, OneRunnerMakesTheSecondCallerWait) {
  const Policy policy(test::package_path("tutorial.pt2"));  // num_runners = 1
  const auto held_in = random_inputs(policy.manifest(), 3);
  const auto other_in = random_inputs(policy.manifest(), 5);
  const auto held_want = policy.run_positional(held_in);
  const auto other_want = policy.run_positional(other_in);
  Gate gate;
  auto held = start_held(gate, [&] { return policy.run_positional(held_in); });
  ASSERT_TRUE(gate.wait_inside()) << "the held call never allocated";
  auto waiting = std::async(std::launch::async, [&] { return policy.run_positional(other_in); });
  // It cannot finish while the only runner is held (if it did, runners would be shared).
  EXPECT_EQ(waiting.wait_for(200ms), std::future_status::timeout);
  gate.release();
  EXPECT_TRUE(all_equal(held.get(), held_want));
  EXPECT_TRUE(all_equal(waiting.get(), other_want));
}

TEST(HeldCall, ASessionRefusesEveryOtherCallWhileAStepRuns) {
  const Policy policy(test::package_path("recurrent.pt2"));
  Session session(policy, 2);
  Session twin(policy, 2);
  const at::Tensor first = at::randn({2, 3});
  const at::Tensor second = at::randn({2, 3});
  const auto first_want = twin.step_positional({first});
  const auto second_want = twin.step_positional({second});

  Gate gate;
  auto held = start_held(gate, [&] { return session.step_positional({first}); });
  ASSERT_TRUE(gate.wait_inside()) << "the held step never allocated";
  const std::string message =
      "tdaot::Session used from two threads at once: a session is single-threaded; give each "
      "thread its own session (they may share one Policy)";
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"step_positional", [&] { session.step_positional({second}); }},
      {"step",
       [&] {
         session.step({{"observation", second}});
       }},
      {"reset", [&] { session.reset(); }},
      {"reset(mask)", [&] { session.reset(at::ones({2}, at::kBool)); }},
  };
  for (const auto& [name, call] : calls) {
    SCOPED_TRACE(name);
    try {
      call();
      ADD_FAILURE() << "accepted while another step runs";
    } catch (const Error& e) {
      EXPECT_EQ(typeid(e), typeid(InvalidArgumentError)) << c10::demangle(typeid(e).name());
      EXPECT_EQ(e.what(), message);
    }
  }
  gate.release();
  // The held step finished normally and the refused calls left no trace: the state moved
  // exactly as the twin's did.
  EXPECT_TRUE(all_equal(held.get(), first_want));
  EXPECT_TRUE(all_equal(session.step_positional({second}), second_want));
}

TEST(HeldCall, SessionsOfOnePolicyDoNotBlockEachOther) {
  PolicyOptions options;
  options.num_runners = 2;
  const Policy policy(test::package_path("recurrent.pt2"), options);
  Session held_session(policy, 1);
  Session other(policy, 1);
  Session twin(policy, 1);
  const at::Tensor observation = at::randn({1, 3});
  const auto want = twin.step_positional({observation});
  Gate gate;
  auto held = start_held(gate, [&] { return held_session.step_positional({observation}); });
  ASSERT_TRUE(gate.wait_inside()) << "the held step never allocated";
  EXPECT_TRUE(all_equal(other.step_positional({observation}), want));
  gate.release();
  EXPECT_TRUE(all_equal(held.get(), want));
}

// A Binding is for one thread: held inside the runner's path (batch 2, where the model
// allocates), every other call on it is refused; the refused calls leave no trace.
TEST(HeldCall, ABindingRefusesEveryOtherCallWhileItRuns) {
  const Policy policy(test::package_path("recurrent.pt2"));
  Binding binding = policy.bind(2);
  Session twin(policy, 2);
  const at::Tensor first = at::randn({2, 3});
  const at::Tensor second = at::randn({2, 3});
  const auto first_want = twin.step_positional({first});
  const auto second_want = twin.step_positional({second});

  binding.input("observation").copy_(first);
  Gate gate;
  auto held = start_held(gate, [&] {
    binding.run();
    return true;
  });
  ASSERT_TRUE(gate.wait_inside()) << "the held run never allocated";
  const std::string message =
      "tdaot::Binding used from two threads at once: a binding is for one thread; bind one per "
      "thread (bindings may share one Policy)";
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"run", [&] { binding.run(); }},
      {"reset", [&] { binding.reset(); }},
      {"reset(mask)", [&] { binding.reset(at::ones({2}, at::kBool)); }},
  };
  for (const auto& [name, call] : calls) {
    SCOPED_TRACE(name);
    try {
      call();
      ADD_FAILURE() << "accepted while another run runs";
    } catch (const Error& e) {
      EXPECT_EQ(typeid(e), typeid(InvalidArgumentError)) << c10::demangle(typeid(e).name());
      EXPECT_EQ(e.what(), message);
    }
  }
  gate.release();
  EXPECT_TRUE(held.get());
  EXPECT_TRUE(all_equal(binding.outputs(), first_want));
  binding.input("observation").copy_(second);
  binding.run();
  EXPECT_TRUE(all_equal(binding.outputs(), second_want));
}

}  // namespace
}  // namespace tdaot
