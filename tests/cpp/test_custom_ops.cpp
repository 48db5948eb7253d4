// Packages calling a custom operator (tdaot_test::scale_clamp from tests/ops, built as
// libtdaot_test_ops.so): PolicyOptions::op_libraries loads it; without it, or with a library
// that cannot be loaded, Policy refuses at load with an error naming the operator or library.
//
// ctest runs every test in a process of its own, so "not loaded yet" holds for the tests that
// need it; run directly, the binary runs the tests in this file's order, and the test that needs
// the operator unregistered comes first (and skips if something registered it anyway).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "runtime/ops.h"
#include "tdaot/errors.h"
#include "tdaot/torch/policy.h"
#include "test_support.h"

namespace tdaot {
namespace {

using test::catch_error;
using test::Contains;

constexpr const char* kOp = "tdaot_test::scale_clamp";

std::string custom_op_package() { return test::package_path("custom_op.pt2"); }

PolicyOptions with_op_library() {
  PolicyOptions options;
  options.op_libraries = {TDAOT_TEST_OPS_LIB};
  return options;
}

TEST(CustomOps, WithoutTheLibraryLoadFailsNamingTheOperator) {
  if (detail::operator_registered(kOp)) GTEST_SKIP() << kOp << " was registered by an earlier test";
  const std::string path = custom_op_package();
  const auto error = catch_error<MissingOperatorError>([&] { Policy policy(path); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "package '" + path + "' calls the custom operator '" + kOp +
                                          "', which no library loaded in this process registers"));
  EXPECT_TRUE(Contains(error->what(), "PolicyOptions::op_libraries, tdaot-run --op-lib"));
  EXPECT_EQ(error->op(), kOp);
  EXPECT_EQ(error->path(), path);
}

TEST(CustomOps, ManifestListsTheOperator) {
  EXPECT_EQ(read_manifest(custom_op_package()).custom_ops, std::vector<std::string>{kOp});
}

TEST(CustomOps, RunsWithItsLibraryAndMatchesTheReference) {
  const Policy policy(custom_op_package(), with_op_library());
  EXPECT_TRUE(detail::operator_registered(kOp));
  const at::Tensor observation = at::linspace(-2, 2, 15).reshape({5, 3});
  const TensorMap out = policy.run({{"observation", observation}});
  // ScaleClampNet: clamp(3 tanh(x) * scale 2, -0.5, 0.5) + 1, in plain ATen.
  const at::Tensor expected = at::clamp(observation.tanh() * 3.0 * 2.0, -0.5, 0.5) + 1.0;
  ASSERT_EQ(out.count("action"), 1u);
  EXPECT_TRUE(at::allclose(out.at("action"), expected, 1e-6, 1e-6))
      << out.at("action") << "\nexpected\n"
      << expected;
  // The positional path and a batch of 1 go through the same operator call.
  const auto single = policy.run_positional({observation.slice(0, 2, 3)});
  EXPECT_TRUE(at::allclose(single.at(0), expected.slice(0, 2, 3), 1e-6, 1e-6));
}

TEST(CustomOps, LoadingTheLibraryTwiceIsHarmless) {
  PolicyOptions options = with_op_library();
  options.op_libraries.push_back(TDAOT_TEST_OPS_LIB);
  const Policy first(custom_op_package(), options);
  const Policy second(custom_op_package(), options);
  EXPECT_EQ(second.run_positional({at::zeros({2, 3})}).at(0).size(0), 2);
}

TEST(CustomOps, MissingLibraryIsAPackageErrorNamingIt) {
  PolicyOptions options;
  options.op_libraries = {"/nonexistent/libtdaot_ops.so"};
  const auto error =
      catch_error<PackageError>([&] { Policy policy(custom_op_package(), options); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(
      Contains(error->what(),
               "custom operator library '/nonexistent/libtdaot_ops.so' could not be loaded: "
               "/nonexistent/libtdaot_ops.so: cannot open shared object file"));
  EXPECT_EQ(error->path(), "/nonexistent/libtdaot_ops.so");
}

TEST(CustomOps, FileThatIsNotALibraryIsAPackageErrorNamingIt) {
  const test::TempDir dir;
  const std::string library = dir.file("libnot_a_library.so");
  test::write_file(library, "not an ELF file\n");
  PolicyOptions options;
  options.op_libraries = {library};
  const auto error =
      catch_error<PackageError>([&] { Policy policy(custom_op_package(), options); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "custom operator library '" + library +
                                          "' could not be loaded: " + library + ": "));
  EXPECT_EQ(error->path(), library);
}

TEST(CustomOps, OverloadNamesAreLookedUpAsOverloads) {
  EXPECT_TRUE(detail::operator_registered("aten::add.Tensor"));
  EXPECT_TRUE(detail::operator_registered("aten::relu"));
  EXPECT_FALSE(detail::operator_registered("aten::relu.no_such_overload"));
  EXPECT_FALSE(detail::operator_registered("no_such_namespace::op"));
}

}  // namespace
}  // namespace tdaot
