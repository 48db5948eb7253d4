// The lite runtime's model instances over their library's own constants
// (lite/inplace_constants.h): every fixture model's constant records are read (so the other lite
// tests run them in place), and a record this reader does not know, a missing one or a wrapper
// source that is absent leaves the model to AOTInductor's copy.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "core/package/package.h"
#include "core/run/model_library.h"
#include "lite/inplace_constants.h"
#include "lite_support.h"
#include "tdaot/lite.h"

namespace tdaot {
namespace {

using lite_test::Contains;

// `source` with its first line holding `needle` replaced by `line` (dropped when empty).
std::string edited(const std::string& source, const std::string& needle, const std::string& line) {
  const size_t at = source.find(needle);
  const size_t begin = source.rfind('\n', at) + 1;
  const size_t end = source.find('\n', at) + 1;
  return source.substr(0, begin) + (line.empty() ? "" : line + "\n") + source.substr(end);
}

TEST(LiteInplaceConstants, EveryFixtureModelIsReadAndAnUnknownRecordFallsBack) {
  std::set<std::string> packages;
  for (const auto& [name, c] : lite_test::expected().items()) packages.insert(c.at("package"));
  ASSERT_FALSE(packages.empty());
  for (const std::string& package : packages) {
    const detail::Package p(lite_test::package_path(package), PackageOptions{});
    std::vector<std::string> names;
    for (const ModelSpec& spec : p.manifest().models) {
      if (spec.lite && spec.lite->runs) names.push_back(spec.name);
    }
    lite_test::TempDir temp;
    const detail::Extraction files = p.extract(temp.path(), names);
    for (const std::string& name : names) {
      const std::string so = files.model(name).library;
      const std::string source = so.substr(0, so.size() - 3) + ".cpp";
      const auto library = detail::ModelLibrary::open(so, RTLD_NOW | RTLD_LOCAL);
      ASSERT_TRUE(library) << so;
      std::string why;
      const auto inplace = detail::InplaceConstants::read(*library, source, why);
      ASSERT_TRUE(inplace) << package << " " << name << ": " << why;
      // An instance over them runs without copying: made and deleted cleanly here.
      detail::ModelInstance instance(*library, inplace->create(*library));

      const std::string text = lite_test::read_file(source);
      const std::string first = "constants_info_[0].name";
      ASSERT_NE(text.find(first), std::string::npos) << source;
      const std::vector<std::pair<std::string, std::string>> cases = {
          {edited(text, first, "    constants_info_[0].opaque_metadata = {1};"),
           "unexpected field in constant 0's record: constants_info_[0].opaque_metadata"},
          {edited(text, "constants_info_[0].dtype", "    constants_info_[0].dtype = cached_torch_dtype_int4;"),
           "unexpected value in constant 0's field 'dtype': cached_torch_dtype_int4"},
          {edited(text, "constants_info_[0].shape", ""), "incomplete"},
          {edited(text, "constants_info_[0].data_size", "    constants_info_[0].data_size = 4;"),
           "does not fit"},
      };
      for (const auto& [edit, expected] : cases) {
        const std::string path = temp.file("edited.cpp");
        lite_test::write_file(path, edit);
        why.clear();
        EXPECT_FALSE(detail::InplaceConstants::read(*library, path, why)) << expected;
        EXPECT_TRUE(Contains(why, expected)) << why;
      }
      why.clear();
      EXPECT_FALSE(detail::InplaceConstants::read(*library, temp.file("absent.cpp"), why));
      EXPECT_TRUE(Contains(why, "no wrapper source"));
    }
  }
}

// What a user sees of it: every loaded lite model of a fixture says its constants are in place,
// and which of them each binding still copies (none of these fixtures has a buffer).
TEST(LiteInplaceConstants, ThePolicyReportsEachModelInPlace) {
  const lite::Policy policy(lite_test::package_path("tutorial.pt2"));
  const std::vector<lite::ModelConstants> constants = policy.constants();
  ASSERT_FALSE(constants.empty());
  EXPECT_EQ(policy.bind(1).model(), constants.front().model);
  for (const lite::ModelConstants& model : constants) {
    EXPECT_TRUE(model.in_place) << model.model << ": " << model.why;
    EXPECT_EQ(model.why, "");
    EXPECT_TRUE(model.copied.empty()) << model.model;
  }
}

}  // namespace
}  // namespace tdaot
