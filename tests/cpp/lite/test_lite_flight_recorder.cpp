// The flight recorder of the lite bound run (BindOptions::record, docs/flight-recorder.md): the
// ring keeps the last N steps in order, each with the bytes the step read and wrote, its resets
// per row, counts, flags and supervisor states; dump, dump_fd and snapshot give the same file;
// a snapshot racing the loop holds only whole slots; every refusal names what is at fault.
// (Allocations: test_lite_zero_allocations.cpp; the full runtime: ../test_flight_recorder.cpp.)
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../flight_log_reader.h"
#include "lite_support.h"
#include "tdaot/errors.h"
#include "tdaot/lite.h"

namespace tdaot {
namespace {

using lite_test::catch_error;
using lite_test::Contains;
using test::FlightLog;

std::string pkg(const std::string& name) { return lite_test::package_path(name); }

// The message of the E `f` throws ("" and a failure when it throws none).
template <typename E, typename F>
std::string what(F&& f) {
  const std::optional<E> error = catch_error<E>(f);
  return error ? std::string(error->what()) : std::string();
}

lite::BindOptions recording(int64_t steps, bool envelope = false) {
  lite::BindOptions options;
  options.record = steps;
  options.envelope = envelope;
  return options;
}

std::string bytes_of(const lite::BoundBuffer& b) { return std::string(static_cast<const char*>(b.data), b.bytes); }

void fill(lite::Binding& b, const std::string& key, float value) {
  float* data = b.input<float>(key);
  int64_t n = 1;
  for (int64_t d : b.input_shape(key)) n *= d;
  for (int64_t i = 0; i < n; ++i) data[i] = value + 0.001f * static_cast<float>(i);
}

TEST(LiteFlightRecorder, TheRingKeepsTheLastStepsInOrderWithTheirBytes) {
  const lite::Policy policy(pkg("tutorial.pt2"));
  lite::Binding b = policy.bind(1, recording(4));
  EXPECT_EQ(b.recording(), 4);
  std::vector<std::string> seen_in, seen_out;  // what each step read and wrote
  for (int step = 1; step <= 10; ++step) {
    fill(b, "observation", 0.1f * static_cast<float>(step));
    std::string in, out;
    for (const lite::BoundBuffer& buffer : b.inputs()) in += bytes_of(buffer);
    b.run();
    for (const lite::BoundBuffer& buffer : b.outputs()) out += bytes_of(buffer);
    seen_in.push_back(in);
    seen_out.push_back(out);
  }
  lite_test::TempDir dir;
  b.dump(dir.file("loop.tdlog"));
  const FlightLog log(lite_test::read_file(dir.file("loop.tdlog")));
  EXPECT_EQ(log.seqs(), (std::vector<uint64_t>{7, 8, 9, 10}));
  int64_t last_start = -1;
  for (size_t slot : log.whole) {
    const auto step = static_cast<size_t>(log.u64(slot, "seq") - 1);
    std::string in, out;
    for (const lite::BoundBuffer& buffer : b.inputs()) in += log.raw(slot, "inputs/" + buffer.key, buffer.bytes);
    for (const lite::BoundBuffer& buffer : b.outputs()) out += log.raw(slot, "outputs/" + buffer.key, buffer.bytes);
    EXPECT_EQ(in, seen_in[step]) << "step " << step + 1;
    EXPECT_EQ(out, seen_out[step]) << "step " << step + 1;
    const auto start = log.value<int64_t>(slot, "start_ns");
    EXPECT_GT(start, last_start);
    EXPECT_GT(log.value<int64_t>(slot, "duration_ns"), 0);
    EXPECT_EQ(log.value<uint32_t>(slot, "flags"), 0u);
    last_start = start;
  }
}

TEST(LiteFlightRecorder, TheHeaderCarriesThePackageAndTheLayout) {
  const lite::Policy policy(pkg("tutorial.pt2"));
  lite::Binding b = policy.bind(1, recording(3));
  b.run();
  const FlightLog log(b.snapshot());
  const nlohmann::json& h = log.header;
  EXPECT_EQ(h["format"], "tdaot-flightlog/1");
  EXPECT_EQ(h["package"]["path"], pkg("tutorial.pt2"));
  EXPECT_EQ(h["package"]["sha256"], policy.sha256());
  EXPECT_EQ(h["package"]["manifest"]["inputs"][0]["key"], "observation");
  EXPECT_EQ(h["runtime"], "lite");
  EXPECT_EQ(h["model"], b.model());
  EXPECT_EQ(h["batch"], 1);
  EXPECT_EQ(h["capacity"], 3);
  EXPECT_EQ(h["envelope"], false);
  EXPECT_EQ(h["supervised"], false);
  EXPECT_TRUE(h["supervisor"].is_null());
  EXPECT_EQ(h["weights"]["sha256"], policy.weights_sha256());
  EXPECT_EQ(h["weights"]["generation"], 0);
  EXPECT_EQ(log.value<uint64_t>(log.whole[0], "weights_generation"), 0u);
  EXPECT_GT(h["bound_at_unix_ns"].get<int64_t>(), 1700000000000000000);
  EXPECT_EQ(h["data_offset"].get<size_t>() % 8, 0u);
  for (const nlohmann::json& f : h["fields"]) EXPECT_EQ(f["offset"].get<size_t>() % 8, 0u) << f;
  EXPECT_EQ(log.field("inputs/observation")["shape"], nlohmann::json({1, 3}));
  EXPECT_EQ(log.field("inputs/observation")["dtype"], "float32");
  EXPECT_EQ(log.field("seq_end")["offset"].get<size_t>() + 8, h["step_bytes"].get<size_t>());
  EXPECT_EQ(log.seqs(), std::vector<uint64_t>{1});  // the other slots are unwritten
}

TEST(LiteFlightRecorder, ResetsAreRecordedPerRowWithTheInputsTheStepRead) {
  const lite::Policy policy(pkg("recurrent_b14.pt2"));
  lite::Binding b = policy.bind(4, recording(8));
  b.run();
  b.run();
  b.reset(std::vector<bool>{true, false, false, true});
  b.run();
  b.reset();
  b.run();
  const FlightLog log(b.snapshot());
  ASSERT_EQ(log.seqs(), (std::vector<uint64_t>{1, 2, 3, 4}));
  const std::vector<std::vector<uint8_t>> expected{{0, 0, 0, 0}, {0, 0, 0, 0}, {1, 0, 0, 1}, {1, 1, 1, 1}};
  for (size_t i = 0; i < 4; ++i) {
    for (size_t row = 0; row < 4; ++row) {
      EXPECT_EQ(log.value<uint8_t>(log.whole[i], "reset", row), expected[i][row]) << "step " << i + 1;
    }
  }
  // is_init as each step read it: every row new on the first step, none on the second, the
  // reset rows on the third.
  const std::string is_init = policy.manifest().recurrent->is_init;
  EXPECT_EQ(log.raw(log.whole[0], "inputs/" + is_init, 4), std::string("\1\1\1\1", 4));
  EXPECT_EQ(log.raw(log.whole[1], "inputs/" + is_init, 4), std::string("\0\0\0\0", 4));
  EXPECT_EQ(log.raw(log.whole[2], "inputs/" + is_init, 4), std::string("\1\0\0\1", 4));
}

TEST(LiteFlightRecorder, InterventionsFlagsAndSupervisorStatesAreRecorded) {
  const lite::Policy policy(pkg("legged.pt2"));
  lite::BindOptions options = recording(16, /*envelope=*/true);
  Supervisor config;
  config.low = {{-0.5}, false};
  config.high = {{0.5}, false};
  config.max_rate_limited_steps = 3;
  options.supervisor.config = config;
  lite::Binding b = policy.bind(1, options);
  std::vector<Interventions> counts;
  std::vector<SupervisorState> states;
  for (int step = 1; step <= 6; ++step) {
    fill(b, "observation", step == 4 ? std::numeric_limits<float>::quiet_NaN() : (step % 2 ? 30.0f : -30.0f));
    b.run();
    counts.push_back(b.interventions());
    states.push_back(b.supervisor());
  }
  const FlightLog log(b.snapshot());
  EXPECT_EQ(log.header["supervised"], true);
  // The supervisor given at bind, in the manifest's form: what a replay binds again.
  EXPECT_EQ(log.header["supervisor"]["low"], -0.5);
  EXPECT_EQ(log.header["supervisor"]["max_rate_limited_steps"], 3);
  EXPECT_EQ(log.header["envelope"], true);
  ASSERT_EQ(log.whole.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const size_t slot = log.whole[i];
    const Interventions& c = counts[i];
    const int64_t want[5] = {c.nonfinite, c.rate_limited, c.blended, c.clipped, c.fallback};
    for (size_t k = 0; k < 5; ++k) EXPECT_EQ(log.value<int64_t>(slot, "interventions", k), want[k]) << i;
    const auto flags = log.value<uint32_t>(slot, "flags");
    const int64_t nonfinite_before = i == 0 ? 0 : counts[i - 1].nonfinite;
    EXPECT_EQ((flags & 2u) != 0, c.nonfinite > nonfinite_before) << "step " << i + 1;
    const size_t sup = log.offset("supervisor");
    int32_t mode = 0;
    double gain = 0.0, damping = 0.0, blend = 0.0;
    int64_t steps = 0;
    std::memcpy(&mode, log.bytes.data() + slot + sup, 4);
    std::memcpy(&gain, log.bytes.data() + slot + sup + 8, 8);
    std::memcpy(&damping, log.bytes.data() + slot + sup + 16, 8);
    std::memcpy(&blend, log.bytes.data() + slot + sup + 24, 8);
    std::memcpy(&steps, log.bytes.data() + slot + sup + 32, 8);
    EXPECT_EQ(mode, static_cast<int32_t>(states[i].mode)) << "step " << i + 1;
    EXPECT_EQ(gain, states[i].gain_scale);
    EXPECT_EQ(damping, states[i].damping_scale);
    EXPECT_EQ(blend, states[i].blend);
    EXPECT_EQ(steps, states[i].steps);
  }
  EXPECT_NE(log.value<uint32_t>(log.whole[3], "flags") & 2u, 0u) << "the NaN step";
  EXPECT_GT(counts.back().rate_limited, 0);
}

TEST(LiteFlightRecorder, DumpFdWritesWhatSnapshotReturns) {
  const lite::Policy policy(pkg("tutorial.pt2"));
  lite::Binding b = policy.bind(1, recording(5));
  for (int i = 0; i < 7; ++i) b.run();
  lite_test::TempDir dir;
  const std::string path = dir.file("fd.tdlog");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  errno = 1234;
  EXPECT_EQ(b.dump_fd(fd), 0);
  EXPECT_EQ(errno, 1234) << "dump_fd leaves errno as it was";
  ::close(fd);
  EXPECT_EQ(lite_test::read_file(path), b.snapshot());
  EXPECT_EQ(b.dump_fd(-1), EBADF);
  const lite::Binding plain = policy.bind(1);
  EXPECT_EQ(plain.recording(), 0);
  EXPECT_EQ(plain.dump_fd(2), EINVAL);
}

TEST(LiteFlightRecorder, RefusalsNameWhatIsAtFault) {
  const lite::Policy policy(pkg("tutorial.pt2"));
  EXPECT_TRUE(Contains(what<InvalidArgumentError>([&] { policy.bind(1, recording(-3)); }),
                       "BindOptions::record is -3"));
  const lite::Binding plain = policy.bind(1);
  EXPECT_TRUE(Contains(what<InvalidArgumentError>([&] { plain.dump("/tmp/never.tdlog"); }),
                       "'" + pkg("tutorial.pt2") + "' does not record: bind it with BindOptions::record = N"));
  EXPECT_TRUE(Contains(what<InvalidArgumentError>([&] { plain.snapshot(); }), "does not record"));
  lite::Binding b = policy.bind(1, recording(2));
  b.run();
  const std::string unwritable = "/nonexistent-dir/flight.tdlog";
  EXPECT_TRUE(Contains(what<Error>([&] { b.dump(unwritable); }),
                       "cannot write the flight log to '" + unwritable + "': No such file or directory"));
}

// A reader thread snapshots the ring while the loop runs: every slot it calls whole holds the
// inputs of its own step (observation = seq) and the outputs that step wrote, never a mix.
TEST(LiteFlightRecorder, ASnapshotRacingTheLoopHoldsOnlyWholeSlots) {
  const lite::Policy policy(pkg("tutorial.pt2"));
  lite::Binding b = policy.bind(1, recording(8));
  constexpr int kMaxSteps = 200000;
  constexpr int kSnapshots = 200;
  std::vector<std::string> written(kMaxSteps + 1);  // each step's first output
  std::atomic<int> steps{0};
  std::atomic<bool> stop{false};
  std::thread loop([&] {
    for (int step = 1; step <= kMaxSteps && !stop.load(); ++step) {
      float* obs = b.input<float>("observation");
      for (int i = 0; i < 3; ++i) obs[i] = static_cast<float>(step);
      b.run();
      written[static_cast<size_t>(step)] = bytes_of(b.outputs()[0]);
      steps.store(step);
    }
  });
  while (steps.load() < 16) std::this_thread::yield();  // the ring full, then race it
  std::vector<std::string> snapshots;
  while (snapshots.size() < kSnapshots && steps.load() < kMaxSteps) snapshots.push_back(b.snapshot());
  const int racing_until = steps.load();
  stop.store(true);
  loop.join();
  size_t checked = 0;
  const std::string out_key = "outputs/" + b.outputs()[0].key;
  for (const std::string& bytes : snapshots) {
    const FlightLog log(bytes);
    for (size_t slot : log.whole) {
      const uint64_t seq = log.u64(slot, "seq");
      for (size_t i = 0; i < 3; ++i) {
        ASSERT_EQ(log.value<float>(slot, "inputs/observation", i), static_cast<float>(seq)) << "torn slot";
      }
      ASSERT_EQ(log.raw(slot, out_key, b.outputs()[0].bytes), written[seq]) << "torn slot " << seq;
      ++checked;
    }
  }
  EXPECT_GT(checked, snapshots.size() * 4) << "most slots of a snapshot are whole";
  std::printf("[flight recorder] %zu snapshots while %d steps ran, %zu whole slots checked\n",
              snapshots.size(), racing_until, checked);
}

}  // namespace
}  // namespace tdaot
