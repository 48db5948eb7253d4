// The flight recorder of the full runtime's bound run (BindOptions::record): the same file as the
// lite runtime's (lite/test_lite_flight_recorder.cpp tests the ring itself), on the
// allocation-free path and the runner's; a step that throws is recorded (flag bit 0, no buffers
// when a tensor was re-pointed); reset(mask) rows are recorded. (CUDA's refusal:
// tests/python/test_cuda.py; allocations: test_zero_allocations.cpp.)
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "flight_log_reader.h"
#include "tdaot/errors.h"
#include "tdaot/torch/binding.h"
#include "tdaot/torch/policy.h"
#include "test_support.h"

namespace tdaot {
namespace {

using test::catch_error;
using test::Contains;
using test::FlightLog;

BindOptions recording(int64_t steps) {
  BindOptions options;
  options.record = steps;
  return options;
}

std::string bytes_of(const at::Tensor& t) {
  return std::string(static_cast<const char*>(t.const_data_ptr()), t.nbytes());
}

TEST(FlightRecorder, TheFullRuntimeRecordsTheBytesOfEachRun) {
  const Policy policy(test::package_path("tutorial.pt2"));
  for (int64_t batch : {1, 3}) {  // the allocation-free path, then the runner's
    SCOPED_TRACE("batch " + std::to_string(batch));
    Binding b = policy.bind(batch, recording(2));
    std::vector<std::string> in, out;
    for (int step = 0; step < 3; ++step) {
      b.input("observation").copy_(at::randn({batch, 3}));
      in.push_back(bytes_of(b.input("observation")));
      b.run();
      std::string outputs;
      for (const at::Tensor& t : b.outputs()) outputs += bytes_of(t);
      out.push_back(outputs);
    }
    const FlightLog log(b.snapshot());
    EXPECT_EQ(log.header["runtime"], "full");
    EXPECT_EQ(log.header["package"]["sha256"], policy.sha256());
    EXPECT_EQ(log.header["model"], b.model());
    ASSERT_EQ(log.seqs(), (std::vector<uint64_t>{2, 3}));
    for (size_t i = 0; i < 2; ++i) {
      const size_t slot = log.whole[i];
      EXPECT_EQ(log.raw(slot, "inputs/observation", in[i + 1].size()), in[i + 1]);
      std::string outputs;
      for (const TensorSpec& spec : policy.manifest().outputs) {
        outputs += log.raw(slot, "outputs/" + spec.key, b.output(spec.key).nbytes());
      }
      EXPECT_EQ(outputs, out[i + 1]);
    }
  }
}

TEST(FlightRecorder, AStepThatThrowsIsRecordedAndRethrown) {
  const Policy policy(test::package_path("tutorial.pt2"));
  Binding b = policy.bind(1, recording(4));
  b.input("observation").fill_(0.5);
  b.run();
  b.input("observation").resize_({1, 300});  // new memory: the run is refused
  const auto error = catch_error<InvalidArgumentError>([&] { b.run(); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "input 'observation' of the binding no longer has the memory"));
  const FlightLog log(b.snapshot());
  ASSERT_EQ(log.seqs(), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(log.value<uint32_t>(log.whole[0], "flags"), 0u);
  EXPECT_EQ(log.value<uint32_t>(log.whole[1], "flags"), 1u) << "bit 0: the step threw";
  EXPECT_EQ(log.value<float>(log.whole[0], "inputs/observation"), 0.5f);
  EXPECT_EQ(log.value<float>(log.whole[1], "inputs/observation"), 0.0f) << "no buffers: they moved";
}

TEST(FlightRecorder, ResetRowsAreRecordedOnTheFullRuntime) {
  const Policy policy(test::package_path("recurrent.pt2"));
  Binding b = policy.bind(3, recording(4));
  b.run();
  b.reset(at::tensor({0, 1, 0}).to(at::kBool));
  b.run();
  const FlightLog log(b.snapshot());
  ASSERT_EQ(log.whole.size(), 2u);
  EXPECT_EQ(log.raw(log.whole[0], "reset", 3), std::string("\0\0\0", 3));
  EXPECT_EQ(log.raw(log.whole[1], "reset", 3), std::string("\0\1\0", 3));
}

TEST(FlightRecorder, ANegativeRecordIsRefused) {
  const Policy policy(test::package_path("tutorial.pt2"));
  const auto error = catch_error<InvalidArgumentError>([&] { policy.bind(1, recording(-1)); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "BindOptions::record is -1"));
}

}  // namespace
}  // namespace tdaot
