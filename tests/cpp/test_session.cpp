// tdaot::Session on the recurrent fixture (examples/policies.py:recurrent_policy):
// inputs observation [3], hidden [8], is_init bool [1]; outputs action [2], next.hidden [8].
// Each step is checked against Policy::run with the state threaded by hand.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>

#include "core/run/busy_guard.h"
#include "tdaot/errors.h"
#include "tdaot/torch/session.h"
#include "test_support.h"

namespace tdaot {
namespace {

using test::catch_error;
using test::Contains;

// A bool mask from 0/1 values (at::tensor has no bool overload on CPU).
at::Tensor mask(std::initializer_list<int64_t> rows) { return at::tensor(rows).to(at::kBool); }

class SessionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    recurrent_ = std::make_unique<Policy>(test::package_path("recurrent.pt2"));
  }
  static void TearDownTestSuite() { recurrent_.reset(); }
  static const Policy& policy() { return *recurrent_; }

  // What the session should do, by hand: the state and is_init it should pass.
  struct Reference {
    at::Tensor hidden;
    at::Tensor is_init;
    explicit Reference(int64_t batch)
        : hidden(at::zeros({batch, 8})), is_init(at::ones({batch, 1}, at::kBool)) {}
    TensorMap step(const at::Tensor& observation) {
      TensorMap out =
          policy().run({{"observation", observation}, {"hidden", hidden}, {"is_init", is_init}});
      hidden = out.at("next.hidden");
      is_init = at::zeros_like(is_init);
      return out;
    }
  };

  static void expect_equal(const TensorMap& got, const TensorMap& want) {
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [key, tensor] : want) EXPECT_TRUE(at::equal(got.at(key), tensor)) << key;
  }

  template <typename E>
  static void expect_error(const std::function<void()>& call, const std::string& key,
                           const std::string& message) {
    const auto error = catch_error<E>(call);
    ASSERT_TRUE(error);
    EXPECT_EQ(error->key(), key);
    EXPECT_TRUE(Contains(error->what(), message));
  }

 private:
  static inline std::unique_ptr<Policy> recurrent_;
};

TEST_F(SessionTest, ManifestNamesTheState) {
  const auto& recurrent = policy().manifest().recurrent;
  ASSERT_TRUE(recurrent);
  ASSERT_EQ(recurrent->state.size(), 1u);
  EXPECT_EQ(recurrent->state[0].input, "hidden");
  EXPECT_EQ(recurrent->state[0].output, "next.hidden");
  EXPECT_EQ(recurrent->is_init, "is_init");
  Session session(policy(), 2);
  ASSERT_EQ(session.inputs().size(), 1u);
  EXPECT_EQ(session.inputs()[0].key, "observation");
  EXPECT_EQ(session.batch(), 2);
}

TEST_F(SessionTest, StepsCarryTheStateLikeManualThreading) {
  Session session(policy(), 3);
  Reference reference(3);
  EXPECT_TRUE(at::equal(session.state().at("hidden"), at::zeros({3, 8})));
  for (int step = 0; step < 5; ++step) {
    const at::Tensor observation = at::randn({3, 3});
    expect_equal(session.step({{"observation", observation}}), reference.step(observation));
    EXPECT_TRUE(at::equal(session.state().at("hidden"), reference.hidden)) << "step " << step;
  }
  EXPECT_FALSE(at::equal(reference.hidden, at::zeros({3, 8})));  // the state did move
}

TEST_F(SessionTest, PositionalAndKeyedStepsAgree) {
  Session keyed(policy(), 2);
  Session positional(policy(), 2);
  for (int step = 0; step < 3; ++step) {
    const at::Tensor observation = at::randn({2, 3});
    const TensorMap by_key = keyed.step({{"observation", observation}});
    const auto in_order = positional.step_positional({observation});
    ASSERT_EQ(in_order.size(), 2u);
    EXPECT_TRUE(at::equal(in_order[0], by_key.at("action")));
    EXPECT_TRUE(at::equal(in_order[1], by_key.at("next.hidden")));
  }
}

TEST_F(SessionTest, ResetZeroesEveryRowAndMarksIsInit) {
  Session session(policy(), 2);
  for (int step = 0; step < 3; ++step) session.step({{"observation", at::randn({2, 3})}});
  session.reset();
  EXPECT_TRUE(at::equal(session.state().at("hidden"), at::zeros({2, 8})));
  Reference fresh(2);
  const at::Tensor observation = at::randn({2, 3});
  expect_equal(session.step({{"observation", observation}}), fresh.step(observation));
}

TEST_F(SessionTest, MaskedResetTouchesOnlyTheMaskedRows) {
  Session session(policy(), 3);
  Reference reference(3);
  for (int step = 0; step < 2; ++step) {
    const at::Tensor observation = at::randn({3, 3});
    session.step({{"observation", observation}});
    reference.step(observation);
  }
  const at::Tensor before = session.state().at("hidden").clone();
  session.reset(mask({0, 1, 0}));
  const at::Tensor after = session.state().at("hidden");
  EXPECT_TRUE(at::equal(after[0], before[0]));
  EXPECT_TRUE(at::equal(after[1], at::zeros({8})));
  EXPECT_TRUE(at::equal(after[2], before[2]));
  // The next step sees is_init true for row 1 only.
  reference.hidden = after.clone();
  reference.is_init = mask({0, 1, 0}).view({3, 1});
  const at::Tensor observation = at::randn({3, 3});
  expect_equal(session.step({{"observation", observation}}), reference.step(observation));
  // ...and false again on the step after.
  const at::Tensor next = at::randn({3, 3});
  expect_equal(session.step({{"observation", next}}), reference.step(next));
}

TEST_F(SessionTest, StateTensorsAreReusedNotReallocated) {
  Session session(policy(), 2);
  const void* storage = session.state().at("hidden").data_ptr();
  for (int step = 0; step < 3; ++step) session.step_positional({at::randn({2, 3})});
  session.reset(mask({1, 0}));
  session.reset();
  EXPECT_EQ(session.state().at("hidden").data_ptr(), storage);
}

TEST_F(SessionTest, SessionsAreIndependent) {
  Session a(policy(), 1);
  Session b(policy(), 1);
  a.step({{"observation", at::randn({1, 3})}});
  EXPECT_TRUE(at::equal(b.state().at("hidden"), at::zeros({1, 8})));
}

TEST_F(SessionTest, SessionKeepsTheModelAliveAfterThePolicyIsGone) {
  auto owned = std::make_unique<Policy>(test::package_path("recurrent.pt2"));
  Session session(*owned, 1);
  owned.reset();
  EXPECT_EQ(session.step({{"observation", at::randn({1, 3})}}).at("action").sizes(),
            at::IntArrayRef({1, 2}));
}

// ---- refusals ----

// ---- a step that carries the state and is_init (a torchrl rollout's TensorDict) ----

TEST_F(SessionTest, AGivenIsInitResetsItsRowsLikeResetMask) {
  Session by_flag(policy(), 3);
  Reference reference(3);
  for (int step = 0; step < 2; ++step) {
    const at::Tensor observation = at::randn({3, 3});
    by_flag.step({{"observation", observation}});
    reference.step(observation);
  }
  // Row 2 starts a new episode: the model sees is_init for it and a zeroed state.
  const at::Tensor flags = mask({0, 0, 1}).view({3, 1});
  reference.hidden.masked_fill_(mask({0, 0, 1}).view({3, 1}), 0);
  reference.is_init = flags;
  const at::Tensor observation = at::randn({3, 3});
  expect_equal(by_flag.step({{"observation", observation}, {"is_init", flags}}),
               reference.step(observation));
  const at::Tensor next = at::randn({3, 3});  // and is_init is false again after it
  expect_equal(by_flag.step({{"observation", next}}), reference.step(next));
}

TEST_F(SessionTest, AGivenStateReplacesTheCarriedOne) {
  Session session(policy(), 2);
  Reference reference(2);
  const at::Tensor first = at::randn({2, 3});
  session.step({{"observation", first}});
  reference.step(first);
  const at::Tensor hidden = at::randn({2, 8});
  reference.hidden = hidden;
  const at::Tensor observation = at::randn({2, 3});
  const TensorMap got = session.step({{"observation", observation}, {"hidden", hidden}});
  expect_equal(got, reference.step(observation));
  EXPECT_TRUE(at::equal(session.state().at("hidden"), reference.hidden));
}

TEST_F(SessionTest, BadCarriedEntriesAreRefusedAndChangeNothing) {
  Session session(policy(), 2);
  expect_error<ShapeError>(
      [&] { session.step({{"observation", at::randn({2, 3})}, {"hidden", at::zeros({2, 7})}}); },
      "hidden", "input 'hidden' has shape [2, 7], expected [B, 8]");
  expect_error<DtypeError>(
      [&] {
        session.step({{"observation", at::randn({2, 3})}, {"is_init", at::ones({2, 1})}});
      },
      "is_init", "input 'is_init' has dtype float32, expected bool");
  EXPECT_TRUE(at::equal(session.state().at("hidden"), at::zeros({2, 8})));
  // The first step still sees every row as new.
  Reference fresh(2);
  const at::Tensor observation = at::randn({2, 3});
  expect_equal(session.step({{"observation", observation}, {"hidden", at::ones({2, 8})}}),
               fresh.step(observation));
}

TEST_F(SessionTest, MissingAndUnknownKeys) {
  Session session(policy(), 2);
  expect_error<MissingKeyError>([&] { session.step({}); }, "observation",
                                "missing input key(s) 'observation'; expected keys: observation");
  expect_error<UnknownKeyError>(
      [&] {
        session.step({{"observation", at::randn({2, 3})}, {"reward", at::randn({2, 1})}});
      },
      "reward", "unknown input key 'reward'; expected keys: observation");
}

TEST_F(SessionTest, RefusesAnotherBatchSize) {
  Session session(policy(), 3);
  expect_error<BatchSizeError>(
      [&] {
        session.step({{"observation", at::randn({2, 3})}});
      },
      "observation",
      "input 'observation' has batch size 2, but the session was created for batch size 3");
}

TEST_F(SessionTest, PositionalRefusesWrongCount) {
  Session session(policy(), 1);
  expect_error<ShapeError>([&] { session.step_positional({}); }, "",
                           "a session step expects 1 inputs (observation), got 0");
}

TEST_F(SessionTest, InputsAreStillValidated) {
  Session session(policy(), 2);
  expect_error<DtypeError>(
      [&] {
        session.step_positional({at::randn({2, 3}, at::kDouble)});
      },
      "observation", "input 'observation' has dtype float64, expected float32");
  expect_error<ShapeError>(
      [&] {
        session.step_positional({at::randn({2, 4})});
      },
      "observation", "input 'observation' has shape [2, 4], expected [B, 3]");
  // A refused step leaves the state alone and the session usable.
  EXPECT_TRUE(at::equal(session.state().at("hidden"), at::zeros({2, 8})));
  EXPECT_NO_THROW(session.step_positional({at::randn({2, 3})}));
}

TEST_F(SessionTest, RefusesBadResetMasks) {
  Session session(policy(), 2);
  expect_error<DtypeError>([&] { session.reset(at::ones({2})); }, "",
                           "the reset mask has dtype float32, expected bool");
  expect_error<ShapeError>([&] { session.reset(at::ones({3}, at::kBool)); }, "",
                           "the reset mask has shape [3], expected [2] (the session's batch)");
  expect_error<ShapeError>(
      [&] {
        session.reset(at::ones({2, 1}, at::kBool));
      },
      "", "the reset mask has shape [2, 1], expected [2]");
  expect_error<DeviceError>(
      [&] {
        session.reset(at::empty({2}, at::TensorOptions().dtype(at::kBool).device(at::kMeta)));
      },
      "", "the reset mask is on device meta, but the session's state is on cpu");
  expect_error<InputError>([&] { session.reset(at::Tensor()); }, "",
                           "the reset mask is an undefined tensor");
}

TEST_F(SessionTest, RefusesABatchOutsideTheRange) {
  expect_error<BatchSizeError>([&] { Session session(policy(), 65); }, "",
                               "a session of batch size 65 for package '" + policy().path() +
                                   "', which accepts batch sizes 1..64");
}

TEST_F(SessionTest, MovedFromSessionThrows) {
  Session session(policy(), 1);
  Session moved = std::move(session);
  EXPECT_NO_THROW(moved.step_positional({at::randn({1, 3})}));
  const auto error = catch_error<Error>([&] { session.reset(); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "this tdaot::Session was moved from"));
}

// ---- one thread per session ----

TEST(BusyGuard, SecondHolderIsRefused) {
  std::atomic<bool> busy{false};
  {
    detail::BusyGuard first(busy, "in use");
    const auto error = catch_error<Error>([&] { detail::BusyGuard second(busy, "in use"); });
    ASSERT_TRUE(error);
    EXPECT_STREQ(error->what(), "in use");
    EXPECT_TRUE(busy.load());  // the refused guard did not release the first one's claim
  }
  EXPECT_FALSE(busy.load());
  EXPECT_NO_THROW(detail::BusyGuard again(busy, "in use"));
}

TEST_F(SessionTest, ConcurrentUseEitherWorksOrIsRefusedClearly) {
  // Two threads hammer one session; every call must succeed or throw the documented error.
  Session session(policy(), 64);
  std::atomic<int> refused{0};
  std::atomic<int> other_errors{0};
  const auto hammer = [&](bool stepping) {
    const at::Tensor observation = at::randn({64, 3});
    for (int i = 0; i < 300; ++i) {
      try {
        if (stepping) {
          session.step_positional({observation});
        } else {
          session.reset();
        }
      } catch (const Error& e) {
        const bool documented =
            std::string(e.what()).find("used from two threads at once") != std::string::npos;
        ++(documented ? refused : other_errors);
      }
    }
  };
  std::thread a(hammer, true);
  std::thread b(hammer, false);
  a.join();
  b.join();
  EXPECT_EQ(other_errors.load(), 0);
  EXPECT_NO_THROW(session.step_positional({at::randn({64, 3})}));
}

}  // namespace
}  // namespace tdaot
