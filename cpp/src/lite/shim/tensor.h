// The lite runtime's tensor handle: what an AtenTensorHandle points at when a model library
// runs on tdaot::lite, i.e. on this project's implementation of torch's C shim (shim.cpp)
// instead of libtorch. A CPU strided tensor: a data pointer into a refcounted storage (owned,
// 64-byte aligned, or a caller's borrowed blob), sizes/strides, dtype, storage offset.
//
// It is not an ATen tensor and has no operators: it carries only what a batch-specialised
// AOTInductor model (minimal arrayref interface, stack allocation) asks of a tensor handle.
// No torch or c10 header is included; the few C types of torch's shim ABI are declared here
// with the same definitions (torch/csrc/inductor/aoti_torch/c/macros.h), so both may be seen
// by one translation unit.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

extern "C" {
struct AtenTensorOpaque;
using AtenTensorHandle = AtenTensorOpaque*;
using AOTITorchError = int32_t;
}
#ifndef AOTI_TORCH_SUCCESS
#define AOTI_TORCH_SUCCESS 0
#define AOTI_TORCH_FAILURE 1
#endif

namespace tdaot::lite::shim {

// AOTI_ARRAYREF_TENSOR_MAX_DIMS of torch 2.13's aoti_runtime/interface.h: the arrayref
// entry point cannot pass more dims, so no handle a bound model sees has more.
constexpr int kMaxDims = 8;

// c10::ScalarType's numbers (c10/core/ScalarType.h), which aoti_torch_dtype_*() return.
namespace dtype {
constexpr int32_t kUInt8 = 0;
constexpr int32_t kInt8 = 1;
constexpr int32_t kInt16 = 2;
constexpr int32_t kInt32 = 3;
constexpr int32_t kInt64 = 4;
constexpr int32_t kFloat16 = 5;
constexpr int32_t kFloat32 = 6;
constexpr int32_t kFloat64 = 7;
constexpr int32_t kBool = 11;
constexpr int32_t kBFloat16 = 15;
}  // namespace dtype

// c10::DeviceType::CPU and c10::Layout::Strided: the only device and layout served.
constexpr int32_t kDeviceCpu = 0;
constexpr int32_t kLayoutStrided = 0;

// Bytes per element of a dtype code; 0 for a dtype the lite runtime does not serve.
constexpr size_t element_size(int32_t code) {
  switch (code) {
    case dtype::kUInt8:
    case dtype::kInt8:
    case dtype::kBool:
      return 1;
    case dtype::kInt16:
    case dtype::kFloat16:
    case dtype::kBFloat16:
      return 2;
    case dtype::kInt32:
    case dtype::kFloat32:
      return 4;
    case dtype::kInt64:
    case dtype::kFloat64:
      return 8;
    default:
      return 0;
  }
}

// Memory shared by every handle made from one allocation or blob (new_tensor_handle shares
// it): freed with the last handle when owned, never when borrowed.
struct Storage {
  void* data = nullptr;
  int64_t nbytes = 0;
  bool owned = false;
  std::atomic<int64_t> refs{1};
};

struct Tensor {
  Storage* storage = nullptr;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
  int64_t ndim = 0;
  int64_t storage_offset = 0;  // in elements, as torch counts it
  int32_t dtype = dtype::kFloat32;
  int32_t device_index = -1;  // -1 or 0: what the handle was made with, as torch reports it

  // The first element (storage data + offset), what aoti_torch_get_data_ptr returns.
  void* data() const {
    return static_cast<char*>(storage->data) + storage_offset * static_cast<int64_t>(element_size(dtype));
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d = 0; d < ndim; ++d) n *= sizes[d];
    return n;
  }
};

inline Tensor* from_handle(AtenTensorHandle handle) { return reinterpret_cast<Tensor*>(handle); }
inline AtenTensorHandle to_handle(Tensor* tensor) { return reinterpret_cast<AtenTensorHandle>(tensor); }

// A handle over a caller's blob, which it does not own (the caller keeps it alive for as
// long as any handle made from it). strides nullptr: contiguous. Returns nullptr for more
// than kMaxDims dims, a negative size or an unserved dtype (last_error() says which).
AtenTensorHandle borrow(void* data, int64_t ndim, const int64_t* sizes, const int64_t* strides,
                        int32_t dtype);

// Frees a handle (and its storage with the last handle); nullptr is ignored.
void release(AtenTensorHandle handle);

// Handles alive in this process: a leak check for tests and for the runtime's own checks
// that a run made none.
int64_t live_handles();

// Why the last failing shim call on this thread failed ("" when none has).
const char* last_error();

}  // namespace tdaot::lite::shim
