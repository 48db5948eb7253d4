// detail::in_layout: a weight file's contiguous tensor placed in the strides a model compiled its
// constant with (a bound convolution's channels-last weight), before either runtime hands it over.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/weights/weights_file.h"
#include "tdaot/errors.h"
#include "fixtures.h"

namespace tdaot::detail {
namespace {

WeightTensor iota(std::vector<int64_t> shape) {
  int64_t count = 1;
  for (int64_t size : shape) count *= size;
  WeightTensor tensor;
  tensor.dtype = DType::Float32;
  tensor.shape = std::move(shape);
  tensor.nbytes = static_cast<size_t>(count) * sizeof(float);
  tensor.data = std::shared_ptr<void>(new float[count], [](void* p) { delete[] static_cast<float*>(p); });
  for (int64_t i = 0; i < count; ++i) static_cast<float*>(tensor.data.get())[i] = static_cast<float>(i);
  return tensor;
}

TEST(WeightLayout, AChannelsLastConstantGetsEveryElementWhereItsStridesPlaceIt) {
  const WeightTensor weight = iota({2, 3, 2, 2});        // OC, C, kh, kw
  const std::vector<int64_t> channels_last{12, 1, 6, 3};  // what torch gives (OC, C, kh, kw)
  const WeightTensor laid = in_layout(weight, channels_last);
  ASSERT_EQ(laid.nbytes, weight.nbytes);
  EXPECT_EQ(laid.shape, weight.shape);
  const auto* from = static_cast<const float*>(weight.data.get());
  const auto* to = static_cast<const float*>(laid.data.get());
  for (int64_t o = 0; o < 2; ++o)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t w = 0; w < 2; ++w) {
          EXPECT_EQ(to[o * 12 + c * 1 + h * 6 + w * 3], from[((o * 3 + c) * 2 + h) * 2 + w])
              << o << c << h << w;
        }
  EXPECT_NE(laid.data.get(), weight.data.get());  // its own bytes: the file's stay as read
}

TEST(WeightLayout, ContiguousAndUnknownStridesShareTheFilesBytes) {
  const WeightTensor bias = iota({4, 1, 3});
  EXPECT_EQ(in_layout(bias, {}).data.get(), bias.data.get());
  EXPECT_EQ(in_layout(bias, {3, 3, 1}).data.get(), bias.data.get());
  EXPECT_EQ(in_layout(bias, {3, 99, 1}).data.get(), bias.data.get());  // a size-1 dim's stride is free
}

TEST(WeightLayout, StridesThatDoNotFitTheShapeAreAnInternalError) {
  const auto error = fixtures::catch_error<Error>([] { in_layout(iota({2, 2}), {1}); });
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(fixtures::Contains(error->what(), "1 strides for a tensor of 2 dims"));
}

}  // namespace
}  // namespace tdaot::detail
