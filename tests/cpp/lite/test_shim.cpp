// Unit tests of the lite runtime's C shim (cpp/src/lite/shim): the aoti_torch_* functions a
// link_libtorch=False model calls, exercised directly, the way a model and the runtime call
// them. No torch: that the shim runs real compiled models is shown by the lite runtime's own
// model tests, not here.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "lite/shim/shim.h"

namespace shim = tdaot::lite::shim;

namespace {

// The handle is released at the end of the scope, whatever the test asserts.
struct Owned {
  AtenTensorHandle handle = nullptr;
  ~Owned() {
    if (handle != nullptr) aoti_torch_delete_tensor_object(handle);
  }
};

std::vector<int64_t> view(const int64_t* values, int64_t n) { return {values, values + n}; }

class Shim : public ::testing::Test {
 protected:
  void SetUp() override { live_before_ = shim::live_handles(); }
  // Every test gives back every handle it made.
  void TearDown() override { EXPECT_EQ(shim::live_handles(), live_before_); }

 private:
  int64_t live_before_ = 0;
};

TEST_F(Shim, DtypeConstantsAreC10ScalarTypeNumbers) {
  EXPECT_EQ(aoti_torch_dtype_uint8(), 0);
  EXPECT_EQ(aoti_torch_dtype_int8(), 1);
  EXPECT_EQ(aoti_torch_dtype_int16(), 2);
  EXPECT_EQ(aoti_torch_dtype_int32(), 3);
  EXPECT_EQ(aoti_torch_dtype_int64(), 4);
  EXPECT_EQ(aoti_torch_dtype_float16(), 5);
  EXPECT_EQ(aoti_torch_dtype_float32(), 6);
  EXPECT_EQ(aoti_torch_dtype_float64(), 7);
  EXPECT_EQ(aoti_torch_dtype_bool(), 11);
  EXPECT_EQ(aoti_torch_dtype_bfloat16(), 15);
  EXPECT_EQ(aoti_torch_device_type_cpu(), 0);
  EXPECT_EQ(aoti_torch_device_type_cuda(), 1);
  EXPECT_EQ(aoti_torch_layout_strided(), 0);
}

TEST_F(Shim, ElementSizes) {
  const std::pair<int32_t, size_t> expected[] = {
      {aoti_torch_dtype_uint8(), 1},   {aoti_torch_dtype_int8(), 1},    {aoti_torch_dtype_bool(), 1},
      {aoti_torch_dtype_int16(), 2},   {aoti_torch_dtype_float16(), 2}, {aoti_torch_dtype_bfloat16(), 2},
      {aoti_torch_dtype_int32(), 4},   {aoti_torch_dtype_float32(), 4}, {aoti_torch_dtype_int64(), 8},
      {aoti_torch_dtype_float64(), 8},
  };
  for (const auto& [code, size] : expected) {
    EXPECT_EQ(shim::element_size(code), size) << "dtype " << code;
    EXPECT_EQ(aoti_torch_dtype_element_size(code), size) << "dtype " << code;
  }
  EXPECT_EQ(shim::element_size(9), 0u);   // complex64: not served
  EXPECT_EQ(shim::element_size(-1), 0u);
}

TEST_F(Shim, CreateFromBlobAndGetters) {
  float data[2 * 3 + 1] = {};
  const int64_t sizes[] = {2, 3};
  const int64_t strides[] = {3, 1};
  Owned t;
  ASSERT_EQ(aoti_torch_create_tensor_from_blob(data, 2, sizes, strides, 1, aoti_torch_dtype_float32(),
                                               aoti_torch_device_type_cpu(), 0, &t.handle),
            AOTI_TORCH_SUCCESS);
  void* ptr = nullptr;
  ASSERT_EQ(aoti_torch_get_data_ptr(t.handle, &ptr), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(ptr, data + 1);  // the data pointer includes the storage offset, as torch's does
  int64_t* got_sizes = nullptr;
  int64_t* got_strides = nullptr;
  ASSERT_EQ(aoti_torch_get_sizes(t.handle, &got_sizes), AOTI_TORCH_SUCCESS);
  ASSERT_EQ(aoti_torch_get_strides(t.handle, &got_strides), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(view(got_sizes, 2), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(view(got_strides, 2), (std::vector<int64_t>{3, 1}));
  int64_t value = 0;
  ASSERT_EQ(aoti_torch_get_dim(t.handle, &value), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(value, 2);
  ASSERT_EQ(aoti_torch_get_numel(t.handle, &value), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(value, 6);
  ASSERT_EQ(aoti_torch_get_storage_offset(t.handle, &value), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(value, 1);
  ASSERT_EQ(aoti_torch_get_storage_size(t.handle, &value), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(value, 7 * 4);  // offset + span, in bytes (c10's computeStorageNbytes)
  ASSERT_EQ(aoti_torch_get_size(t.handle, -1, &value), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(value, 3);
  ASSERT_EQ(aoti_torch_get_stride(t.handle, 0, &value), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(value, 3);
  EXPECT_EQ(aoti_torch_get_size(t.handle, 2, &value), AOTI_TORCH_FAILURE);
  int32_t code = -1;
  ASSERT_EQ(aoti_torch_get_dtype(t.handle, &code), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(code, aoti_torch_dtype_float32());
  ASSERT_EQ(aoti_torch_get_device_type(t.handle, &code), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(code, aoti_torch_device_type_cpu());
  ASSERT_EQ(aoti_torch_get_device_index(t.handle, &code), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(code, 0);
  ASSERT_EQ(aoti_torch_get_layout(t.handle, &code), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(code, aoti_torch_layout_strided());
}

TEST_F(Shim, CreateFromBlobV2RefusesOtherLayoutsDevicesAndDtypes) {
  float data[4] = {};
  const int64_t sizes[] = {4};
  const int64_t strides[] = {1};
  Owned ok;
  EXPECT_EQ(aoti_torch_create_tensor_from_blob_v2(data, 1, sizes, strides, 0, aoti_torch_dtype_float32(),
                                                  aoti_torch_device_type_cpu(), -1, &ok.handle,
                                                  aoti_torch_layout_strided(), nullptr, 0),
            AOTI_TORCH_SUCCESS);
  AtenTensorHandle bad = nullptr;
  const int32_t mkldnn = 4;  // c10::Layout::Mkldnn
  EXPECT_EQ(aoti_torch_create_tensor_from_blob_v2(data, 1, sizes, strides, 0, aoti_torch_dtype_float32(),
                                                  aoti_torch_device_type_cpu(), 0, &bad, mkldnn, nullptr, 0),
            AOTI_TORCH_FAILURE);
  EXPECT_EQ(aoti_torch_create_tensor_from_blob(data, 1, sizes, strides, 0, aoti_torch_dtype_float32(),
                                               aoti_torch_device_type_cuda(), 0, &bad),
            AOTI_TORCH_FAILURE);
  EXPECT_STRNE(shim::last_error(), "");
  EXPECT_EQ(aoti_torch_create_tensor_from_blob(data, 1, sizes, strides, 0, /*complex64*/ 9,
                                               aoti_torch_device_type_cpu(), 0, &bad),
            AOTI_TORCH_FAILURE);
  const int64_t too_many[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  EXPECT_EQ(aoti_torch_create_tensor_from_blob(data, 9, too_many, too_many, 0, aoti_torch_dtype_float32(),
                                               aoti_torch_device_type_cpu(), 0, &bad),
            AOTI_TORCH_FAILURE);
  EXPECT_EQ(bad, nullptr);
}

TEST_F(Shim, BorrowedBlobOutlivesItsHandles) {
  int32_t data[3] = {7, 8, 9};
  const int64_t sizes[] = {3};
  AtenTensorHandle handle = shim::borrow(data, 1, sizes, nullptr, aoti_torch_dtype_int32());
  ASSERT_NE(handle, nullptr);
  int64_t* strides = nullptr;
  ASSERT_EQ(aoti_torch_get_strides(handle, &strides), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(strides[0], 1);
  shim::release(handle);  // frees the handle, not the caller's blob
  EXPECT_EQ(data[2], 9);
  EXPECT_EQ(shim::borrow(data, 1, sizes, nullptr, /*complex64*/ 9), nullptr);
}

TEST_F(Shim, EmptyStridedAllocatesAlignedStorageForItsStrides) {
  const int64_t sizes[] = {2, 3};
  const int64_t strides[] = {1, 4};  // column-major with a gap: spans 1 + 1 + 2 * 4 = 10 elements
  Owned t;
  ASSERT_EQ(aoti_torch_empty_strided(2, sizes, strides, aoti_torch_dtype_float64(), aoti_torch_device_type_cpu(),
                                     0, &t.handle),
            AOTI_TORCH_SUCCESS);
  void* ptr = nullptr;
  ASSERT_EQ(aoti_torch_get_data_ptr(t.handle, &ptr), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ptr) % 64, 0u);
  std::memset(ptr, 0, 10 * sizeof(double));  // all of it is writable (sanitizers check)
  int64_t* got = nullptr;
  ASSERT_EQ(aoti_torch_get_strides(t.handle, &got), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(view(got, 2), (std::vector<int64_t>{1, 4}));
  int64_t bytes = 0;
  ASSERT_EQ(aoti_torch_get_storage_size(t.handle, &bytes), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(bytes, 10 * 8);
  AtenTensorHandle bad = nullptr;
  EXPECT_EQ(aoti_torch_empty_strided(2, sizes, strides, aoti_torch_dtype_float32(), aoti_torch_device_type_cuda(),
                                     0, &bad),
            AOTI_TORCH_FAILURE);
}

TEST_F(Shim, EmptyStridedOfNoElements) {
  const int64_t sizes[] = {0, 4};
  const int64_t strides[] = {4, 1};
  Owned t;
  ASSERT_EQ(aoti_torch_empty_strided(2, sizes, strides, aoti_torch_dtype_float32(), aoti_torch_device_type_cpu(),
                                     0, &t.handle),
            AOTI_TORCH_SUCCESS);
  int64_t value = -1;
  ASSERT_EQ(aoti_torch_get_numel(t.handle, &value), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(value, 0);
  ASSERT_EQ(aoti_torch_get_storage_size(t.handle, &value), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(value, 0);
}

TEST_F(Shim, CloneOfAStridedViewIsContiguous) {
  // Every other column of a 3x4 matrix: a 3x2 view with strides (4, 2), not dense.
  float data[12];
  for (int i = 0; i < 12; ++i) data[i] = static_cast<float>(i);
  const int64_t sizes[] = {3, 2};
  const int64_t strides[] = {4, 2};
  Owned source, copy;
  ASSERT_EQ(aoti_torch_create_tensor_from_blob(data, 2, sizes, strides, 1, aoti_torch_dtype_float32(),
                                               aoti_torch_device_type_cpu(), 0, &source.handle),
            AOTI_TORCH_SUCCESS);
  ASSERT_EQ(aoti_torch_clone(source.handle, &copy.handle), AOTI_TORCH_SUCCESS);
  int64_t* got = nullptr;
  ASSERT_EQ(aoti_torch_get_strides(copy.handle, &got), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(view(got, 2), (std::vector<int64_t>{2, 1}));
  int64_t offset = -1;
  ASSERT_EQ(aoti_torch_get_storage_offset(copy.handle, &offset), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(offset, 0);
  void* ptr = nullptr;
  ASSERT_EQ(aoti_torch_get_data_ptr(copy.handle, &ptr), AOTI_TORCH_SUCCESS);
  EXPECT_NE(ptr, static_cast<void*>(data));
  const auto* values = static_cast<const float*>(ptr);
  EXPECT_EQ(std::vector<float>(values, values + 6), (std::vector<float>{1, 3, 5, 7, 9, 11}));
  data[1] = -1;  // a copy: the source's storage is not shared
  EXPECT_EQ(values[0], 1);
}

TEST_F(Shim, CloneOfADenseTransposeKeepsItsStrides) {
  // at::clone's preserve format: a dense (permuted) layout is kept, as torch's shim does.
  int64_t data[6] = {0, 1, 2, 3, 4, 5};
  const int64_t sizes[] = {3, 2};
  const int64_t strides[] = {1, 3};  // the transpose of a contiguous 2x3
  Owned source, copy;
  ASSERT_EQ(aoti_torch_create_tensor_from_blob(data, 2, sizes, strides, 0, aoti_torch_dtype_int64(),
                                               aoti_torch_device_type_cpu(), 0, &source.handle),
            AOTI_TORCH_SUCCESS);
  ASSERT_EQ(aoti_torch_clone(source.handle, &copy.handle), AOTI_TORCH_SUCCESS);
  int64_t* got = nullptr;
  ASSERT_EQ(aoti_torch_get_strides(copy.handle, &got), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(view(got, 2), (std::vector<int64_t>{1, 3}));
  void* ptr = nullptr;
  ASSERT_EQ(aoti_torch_get_data_ptr(copy.handle, &ptr), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(std::memcmp(ptr, data, sizeof data), 0);
}

TEST_F(Shim, NewTensorHandleSharesStorageAndSurvivesTheFirst) {
  const int64_t sizes[] = {4};
  const int64_t strides[] = {1};
  AtenTensorHandle first = nullptr;
  ASSERT_EQ(aoti_torch_empty_strided(1, sizes, strides, aoti_torch_dtype_float32(), aoti_torch_device_type_cpu(),
                                     0, &first),
            AOTI_TORCH_SUCCESS);
  Owned second;
  ASSERT_EQ(aoti_torch_new_tensor_handle(first, &second.handle), AOTI_TORCH_SUCCESS);
  EXPECT_NE(second.handle, first);
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_EQ(aoti_torch_get_data_ptr(first, &a), AOTI_TORCH_SUCCESS);
  ASSERT_EQ(aoti_torch_get_data_ptr(second.handle, &b), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(a, b);
  static_cast<float*>(a)[3] = 42.0f;
  ASSERT_EQ(aoti_torch_delete_tensor_object(first), AOTI_TORCH_SUCCESS);
  // The storage lives on with the second handle (a sanitizer would catch a use after free).
  EXPECT_EQ(static_cast<float*>(b)[3], 42.0f);
  int64_t* got = nullptr;
  ASSERT_EQ(aoti_torch_get_sizes(second.handle, &got), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(got[0], 4);
}

TEST_F(Shim, ReinterpretTensorIsAViewInsideItsStorage) {
  float data[6] = {0, 1, 2, 3, 4, 5};
  const int64_t sizes[] = {6};
  const int64_t strides[] = {1};
  Owned base, part;
  ASSERT_EQ(aoti_torch_create_tensor_from_blob(data, 1, sizes, strides, 0, aoti_torch_dtype_float32(),
                                               aoti_torch_device_type_cpu(), 0, &base.handle),
            AOTI_TORCH_SUCCESS);
  const int64_t view_sizes[] = {2, 2};
  const int64_t view_strides[] = {2, 1};
  ASSERT_EQ(aoti_torch__reinterpret_tensor(base.handle, 2, view_sizes, view_strides, 2, &part.handle),
            AOTI_TORCH_SUCCESS);
  void* ptr = nullptr;
  ASSERT_EQ(aoti_torch_get_data_ptr(part.handle, &ptr), AOTI_TORCH_SUCCESS);
  EXPECT_EQ(ptr, data + 2);
  AtenTensorHandle past_end = nullptr;
  EXPECT_EQ(aoti_torch__reinterpret_tensor(base.handle, 2, view_sizes, view_strides, 3, &past_end),
            AOTI_TORCH_FAILURE);
}

TEST_F(Shim, NullHandlesFail) {
  EXPECT_EQ(aoti_torch_delete_tensor_object(nullptr), AOTI_TORCH_FAILURE);
  void* ptr = nullptr;
  EXPECT_EQ(aoti_torch_get_data_ptr(nullptr, &ptr), AOTI_TORCH_FAILURE);
  AtenTensorHandle copy = nullptr;
  EXPECT_EQ(aoti_torch_clone(nullptr, &copy), AOTI_TORCH_FAILURE);
  EXPECT_EQ(aoti_torch_new_tensor_handle(nullptr, &copy), AOTI_TORCH_FAILURE);
  EXPECT_EQ(copy, nullptr);
  shim::release(nullptr);  // ignored
}

TEST_F(Shim, GradModeIsPerThreadAndOnByDefault) {
  EXPECT_TRUE(aoti_torch_grad_mode_is_enabled());
  aoti_torch_grad_mode_set_enabled(false);
  EXPECT_FALSE(aoti_torch_grad_mode_is_enabled());
  bool other = false;
  std::thread([&] { other = aoti_torch_grad_mode_is_enabled(); }).join();
  EXPECT_TRUE(other);  // another thread still has its own default
  aoti_torch_grad_mode_set_enabled(true);
  EXPECT_TRUE(aoti_torch_grad_mode_is_enabled());
}

TEST_F(Shim, CheckThrowsWithTheModelsMessageOnlyWhenFalse) {
  EXPECT_NO_THROW(aoti_torch_check(true, "f", "k.cpp", 7, "never"));
  try {
    aoti_torch_check(false, "kernel", "k.cpp", 42, "index 9 is out of bounds for size 4");
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("index 9 is out of bounds for size 4 (kernel at k.cpp:42)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
