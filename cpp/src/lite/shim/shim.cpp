// The lite runtime's implementation of the torch C shim functions (aoti_torch_*) that a
// batch-specialised AOTInductor model library needs when it is built with
// aot_inductor.link_libtorch=False: exported with default visibility from libtdaot_lite.so,
// where the dynamic linker resolves the model's undefined symbols.
//
// CPU, strided layout and the ten dtypes of a tdaot manifest only; anything else fails with
// AOTI_TORCH_FAILURE (the model then throws) and leaves a message in last_error(). It is not
// ATen: no operator is implemented. The semantics follow torch 2.13's shim_common.cpp where
// a model could tell the difference (data pointer includes the storage offset, storage size
// as computeStorageNbytes counts it, clone preserving a dense tensor's strides, grad mode on
// by default on every thread).
#include "shim.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

namespace tdaot::lite::shim {
namespace {

// c10::DeviceType::CUDA: models test a handle's device against it; no handle is ever CUDA.
constexpr int32_t kDeviceCuda = 1;
// Owned storage is aligned like c10's CPU allocator (gAlignment = 64).
constexpr size_t kAlignment = 64;

thread_local bool grad_mode = true;  // c10's default on every thread
thread_local const char* error_text = "";
std::atomic<int64_t> live{0};

AOTITorchError fail(const char* why) {
  error_text = why;
  return AOTI_TORCH_FAILURE;
}

// Bytes spanned by a strided tensor from its storage's start (c10's computeStorageNbytes):
// 0 when it has no element.
int64_t storage_nbytes(int64_t ndim, const int64_t* sizes, const int64_t* strides, size_t itemsize,
                       int64_t storage_offset) {
  int64_t last = 0;
  for (int64_t d = 0; d < ndim; ++d) {
    if (sizes[d] == 0) return 0;
    last += (sizes[d] - 1) * strides[d];
  }
  return static_cast<int64_t>(itemsize) * (storage_offset + last + 1);
}

void contiguous_strides(int64_t ndim, const int64_t* sizes, int64_t* strides) {
  int64_t stride = 1;
  for (int64_t d = ndim - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= sizes[d] > 1 ? sizes[d] : 1;
  }
}

AOTITorchError check_shape(int64_t ndim, const int64_t* sizes, const int64_t* strides) {
  if (ndim < 0 || ndim > kMaxDims) return fail("more dims than the lite runtime's tensors hold (8)");
  if (ndim > 0 && sizes == nullptr) return fail("sizes is null");
  for (int64_t d = 0; d < ndim; ++d) {
    if (sizes[d] < 0) return fail("negative size");
    if (strides != nullptr && strides[d] < 0) return fail("negative stride");
  }
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError check_placement(int32_t dtype, int32_t device_type, int32_t device_index) {
  if (element_size(dtype) == 0) return fail("a dtype the lite runtime does not serve");
  if (device_type != kDeviceCpu) return fail("a device other than the CPU");
  if (device_index != 0 && device_index != -1) return fail("a CPU device index other than 0");
  return AOTI_TORCH_SUCCESS;
}

// A new handle on `storage` (whose reference the caller passes on); strides nullptr: contiguous.
Tensor* make(Storage* storage, int64_t ndim, const int64_t* sizes, const int64_t* strides,
             int64_t storage_offset, int32_t dtype, int32_t device_index) {
  auto* tensor = new (std::nothrow) Tensor;
  if (tensor == nullptr) return nullptr;
  tensor->storage = storage;
  tensor->ndim = ndim;
  tensor->dtype = dtype;
  tensor->storage_offset = storage_offset;
  tensor->device_index = device_index;
  for (int64_t d = 0; d < ndim; ++d) tensor->sizes[d] = sizes[d];
  if (strides != nullptr) {
    for (int64_t d = 0; d < ndim; ++d) tensor->strides[d] = strides[d];
  } else {
    contiguous_strides(ndim, sizes, tensor->strides);
  }
  live.fetch_add(1, std::memory_order_relaxed);
  return tensor;
}

void unref(Storage* storage) {
  if (storage->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (storage->owned) std::free(storage->data);
  delete storage;
}

Storage* allocate(int64_t nbytes) {
  auto* storage = new (std::nothrow) Storage;
  if (storage == nullptr) return nullptr;
  storage->nbytes = nbytes;
  storage->owned = true;
  if (nbytes > 0) {
    // aligned_alloc wants a multiple of the alignment.
    const size_t rounded = (static_cast<size_t>(nbytes) + kAlignment - 1) / kAlignment * kAlignment;
    storage->data = std::aligned_alloc(kAlignment, rounded);
    if (storage->data == nullptr) {
      delete storage;
      return nullptr;
    }
  }
  return storage;
}

// Whether the strides lay the elements out densely with no overlap (a permutation of a
// contiguous layout), as c10's is_non_overlapping_and_dense decides it.
bool dense(const Tensor& t) {
  int64_t order[kMaxDims];
  for (int64_t d = 0; d < t.ndim; ++d) order[d] = d;
  // Insertion sort of the dims by stride (size-1 dims go first: their stride is free).
  for (int64_t i = 1; i < t.ndim; ++i) {
    for (int64_t j = i; j > 0; --j) {
      const int64_t a = order[j - 1], b = order[j];
      const bool swap = t.sizes[a] != 1 && (t.sizes[b] == 1 || t.strides[b] < t.strides[a]);
      if (!swap) break;
      order[j - 1] = b;
      order[j] = a;
    }
  }
  int64_t expected = 1;
  for (int64_t i = 0; i < t.ndim; ++i) {
    const int64_t d = order[i];
    if (t.sizes[d] == 1) continue;
    if (t.strides[d] != expected) return false;
    expected *= t.sizes[d];
  }
  return true;
}

// Copies every element of `src` to `dst` (same sizes and dtype), each with its own strides.
void strided_copy(const Tensor& src, Tensor& dst) {
  const size_t itemsize = element_size(src.dtype);
  const int64_t numel = src.numel();
  const auto* from = static_cast<const char*>(src.data());
  auto* to = static_cast<char*>(dst.data());
  int64_t index[kMaxDims] = {};
  for (int64_t n = 0; n < numel; ++n) {
    int64_t a = 0, b = 0;
    for (int64_t d = 0; d < src.ndim; ++d) {
      a += index[d] * src.strides[d];
      b += index[d] * dst.strides[d];
    }
    std::memcpy(to + b * static_cast<int64_t>(itemsize), from + a * static_cast<int64_t>(itemsize), itemsize);
    for (int64_t d = src.ndim - 1; d >= 0; --d) {
      if (++index[d] < src.sizes[d]) break;
      index[d] = 0;
    }
  }
}

AOTITorchError from_blob(void* data, int64_t ndim, const int64_t* sizes, const int64_t* strides,
                         int64_t storage_offset, int32_t dtype, int32_t device_type,
                         int32_t device_index, AtenTensorHandle* ret) {
  if (ret == nullptr) return fail("ret is null");
  if (check_shape(ndim, sizes, strides) != AOTI_TORCH_SUCCESS ||
      check_placement(dtype, device_type, device_index) != AOTI_TORCH_SUCCESS) {
    return AOTI_TORCH_FAILURE;
  }
  if (storage_offset < 0) return fail("negative storage offset");
  auto* storage = new (std::nothrow) Storage;
  if (storage == nullptr) return fail("out of memory");
  storage->data = data;
  storage->owned = false;
  Tensor* tensor = make(storage, ndim, sizes, strides, storage_offset, dtype, device_index);
  if (tensor == nullptr) {
    delete storage;
    return fail("out of memory");
  }
  storage->nbytes = storage_nbytes(ndim, sizes, tensor->strides, element_size(dtype), storage_offset);
  *ret = to_handle(tensor);
  return AOTI_TORCH_SUCCESS;
}

}  // namespace

AtenTensorHandle borrow(void* data, int64_t ndim, const int64_t* sizes, const int64_t* strides,
                        int32_t dtype) {
  AtenTensorHandle handle = nullptr;
  if (from_blob(data, ndim, sizes, strides, 0, dtype, kDeviceCpu, -1, &handle) != AOTI_TORCH_SUCCESS) {
    return nullptr;
  }
  return handle;
}

void release(AtenTensorHandle handle) {
  if (handle == nullptr) return;
  Tensor* tensor = from_handle(handle);
  unref(tensor->storage);
  delete tensor;
  live.fetch_sub(1, std::memory_order_relaxed);
}

int64_t live_handles() { return live.load(std::memory_order_relaxed); }

const char* last_error() { return error_text; }

}  // namespace tdaot::lite::shim

using namespace tdaot::lite::shim;

// The common checks of a call on a handle: a handle, and somewhere to write the result.
#define TDAOT_CHECK_ARGS(handle, out) \
  if ((handle) == nullptr) return fail("the tensor handle is null"); \
  if ((out) == nullptr) return fail("the result pointer is null")

extern "C" {

int32_t aoti_torch_device_type_cpu() { return kDeviceCpu; }
int32_t aoti_torch_device_type_cuda() { return kDeviceCuda; }
int32_t aoti_torch_layout_strided() { return kLayoutStrided; }
int32_t aoti_torch_dtype_float32() { return dtype::kFloat32; }
int32_t aoti_torch_dtype_float64() { return dtype::kFloat64; }
int32_t aoti_torch_dtype_float16() { return dtype::kFloat16; }
int32_t aoti_torch_dtype_bfloat16() { return dtype::kBFloat16; }
int32_t aoti_torch_dtype_int64() { return dtype::kInt64; }
int32_t aoti_torch_dtype_int32() { return dtype::kInt32; }
int32_t aoti_torch_dtype_int16() { return dtype::kInt16; }
int32_t aoti_torch_dtype_int8() { return dtype::kInt8; }
int32_t aoti_torch_dtype_uint8() { return dtype::kUInt8; }
int32_t aoti_torch_dtype_bool() { return dtype::kBool; }
size_t aoti_torch_dtype_element_size(int32_t dtype) { return element_size(dtype); }

bool aoti_torch_grad_mode_is_enabled() { return grad_mode; }
void aoti_torch_grad_mode_set_enabled(bool enabled) { grad_mode = enabled; }

// A model's runtime check (AOTI_TORCH_CHECK: an index in range, a size as compiled). torch throws
// a c10::Error; a C++ exception likewise, which the model's entry point turns into an error code
// and the message AOTInductorGetLastError returns.
void aoti_torch_check(bool cond, const char* func, const char* file, uint32_t line, const char* msg) {
  if (cond) return;
  throw std::runtime_error(std::string(msg != nullptr ? msg : "check failed") + " (" +
                           (func != nullptr ? func : "?") + " at " + (file != nullptr ? file : "?") +
                           ":" + std::to_string(line) + ")");
}

AOTITorchError aoti_torch_create_tensor_from_blob(void* data, int64_t ndim, const int64_t* sizes_ptr,
                                                  const int64_t* strides_ptr, int64_t storage_offset,
                                                  int32_t dtype, int32_t device_type,
                                                  int32_t device_index, AtenTensorHandle* ret) {
  if (strides_ptr == nullptr && ndim > 0) return fail("strides is null");  // torch reads them
  return from_blob(data, ndim, sizes_ptr, strides_ptr, storage_offset, dtype, device_type,
                   device_index, ret);
}

AOTITorchError aoti_torch_create_tensor_from_blob_v2(void* data, int64_t ndim, const int64_t* sizes_ptr,
                                                     const int64_t* strides_ptr, int64_t storage_offset,
                                                     int32_t dtype, int32_t device_type,
                                                     int32_t device_index, AtenTensorHandle* ret,
                                                     int32_t layout, const uint8_t* opaque_metadata,
                                                     int64_t opaque_metadata_size) {
  // Opaque metadata only describes mkldnn-layout blobs, which are refused here.
  (void)opaque_metadata;
  (void)opaque_metadata_size;
  if (layout != kLayoutStrided) return fail("a layout other than strided");
  return aoti_torch_create_tensor_from_blob(data, ndim, sizes_ptr, strides_ptr, storage_offset, dtype,
                                            device_type, device_index, ret);
}

AOTITorchError aoti_torch_empty_strided(int64_t ndim, const int64_t* sizes_ptr, const int64_t* strides_ptr,
                                        int32_t dtype, int32_t device_type, int32_t device_index,
                                        AtenTensorHandle* ret_new_tensor) {
  if (ret_new_tensor == nullptr) return fail("the result pointer is null");
  if (strides_ptr == nullptr && ndim > 0) return fail("strides is null");
  if (check_shape(ndim, sizes_ptr, strides_ptr) != AOTI_TORCH_SUCCESS ||
      check_placement(dtype, device_type, device_index) != AOTI_TORCH_SUCCESS) {
    return AOTI_TORCH_FAILURE;
  }
  Storage* storage = allocate(storage_nbytes(ndim, sizes_ptr, strides_ptr, element_size(dtype), 0));
  if (storage == nullptr) return fail("out of memory");
  Tensor* tensor = make(storage, ndim, sizes_ptr, strides_ptr, 0, dtype, device_index);
  if (tensor == nullptr) {
    unref(storage);
    return fail("out of memory");
  }
  *ret_new_tensor = to_handle(tensor);
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch_clone(AtenTensorHandle self, AtenTensorHandle* ret) {
  TDAOT_CHECK_ARGS(self, ret);
  const Tensor& src = *from_handle(self);
  // at::clone's preserve format: a dense tensor keeps its strides, any other is contiguous.
  int64_t strides[kMaxDims];
  if (dense(src)) {
    for (int64_t d = 0; d < src.ndim; ++d) strides[d] = src.strides[d];
  } else {
    contiguous_strides(src.ndim, src.sizes, strides);
  }
  AtenTensorHandle copy = nullptr;
  if (aoti_torch_empty_strided(src.ndim, src.sizes, strides, src.dtype, kDeviceCpu, src.device_index, &copy) !=
      AOTI_TORCH_SUCCESS) {
    return AOTI_TORCH_FAILURE;
  }
  strided_copy(src, *from_handle(copy));
  *ret = copy;
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch_new_tensor_handle(AtenTensorHandle orig_handle, AtenTensorHandle* new_handle) {
  TDAOT_CHECK_ARGS(orig_handle, new_handle);
  const Tensor& orig = *from_handle(orig_handle);
  orig.storage->refs.fetch_add(1, std::memory_order_relaxed);
  Tensor* tensor = make(orig.storage, orig.ndim, orig.sizes, orig.strides, orig.storage_offset, orig.dtype,
                        orig.device_index);
  if (tensor == nullptr) {
    unref(orig.storage);
    return fail("out of memory");
  }
  *new_handle = to_handle(tensor);
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch__reinterpret_tensor(AtenTensorHandle self, int64_t ndim, const int64_t* sizes_ptr,
                                              const int64_t* strides_ptr, int64_t storage_offset,
                                              AtenTensorHandle* ret_new_tensor) {
  TDAOT_CHECK_ARGS(self, ret_new_tensor);
  if (strides_ptr == nullptr && ndim > 0) return fail("strides is null");
  if (check_shape(ndim, sizes_ptr, strides_ptr) != AOTI_TORCH_SUCCESS) return AOTI_TORCH_FAILURE;
  if (storage_offset < 0) return fail("negative storage offset");
  const Tensor& orig = *from_handle(self);
  // A view stays inside its storage: the lite runtime never grows one (torch would).
  if (storage_nbytes(ndim, sizes_ptr, strides_ptr, element_size(orig.dtype), storage_offset) >
      orig.storage->nbytes) {
    return fail("a view past the end of its storage");
  }
  orig.storage->refs.fetch_add(1, std::memory_order_relaxed);
  Tensor* tensor = make(orig.storage, ndim, sizes_ptr, strides_ptr, storage_offset, orig.dtype,
                        orig.device_index);
  if (tensor == nullptr) {
    unref(orig.storage);
    return fail("out of memory");
  }
  *ret_new_tensor = to_handle(tensor);
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch_delete_tensor_object(AtenTensorHandle tensor) {
  if (tensor == nullptr) return fail("the tensor handle is null");
  release(tensor);
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch_get_data_ptr(AtenTensorHandle tensor, void** ret_data_ptr) {
  TDAOT_CHECK_ARGS(tensor, ret_data_ptr);
  *ret_data_ptr = from_handle(tensor)->data();
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch_get_storage_size(AtenTensorHandle tensor, int64_t* ret_size) {
  TDAOT_CHECK_ARGS(tensor, ret_size);
  *ret_size = from_handle(tensor)->storage->nbytes;
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch_get_storage_offset(AtenTensorHandle tensor, int64_t* ret_storage_offset) {
  TDAOT_CHECK_ARGS(tensor, ret_storage_offset);
  *ret_storage_offset = from_handle(tensor)->storage_offset;
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch_get_dim(AtenTensorHandle tensor, int64_t* ret_dim) {
  TDAOT_CHECK_ARGS(tensor, ret_dim);
  *ret_dim = from_handle(tensor)->ndim;
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch_get_numel(AtenTensorHandle tensor, int64_t* ret_numel) {
  TDAOT_CHECK_ARGS(tensor, ret_numel);
  *ret_numel = from_handle(tensor)->numel();
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch_get_sizes(AtenTensorHandle tensor, int64_t** ret_sizes) {
  TDAOT_CHECK_ARGS(tensor, ret_sizes);
  *ret_sizes = from_handle(tensor)->sizes;
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch_get_size(AtenTensorHandle tensor, int64_t d, int64_t* ret_size) {
  TDAOT_CHECK_ARGS(tensor, ret_size);
  const Tensor& t = *from_handle(tensor);
  if (d < 0) d += t.ndim;  // torch wraps negative dims
  if (d < 0 || d >= t.ndim) return fail("dim out of range");
  *ret_size = t.sizes[d];
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch_get_strides(AtenTensorHandle tensor, int64_t** ret_strides) {
  TDAOT_CHECK_ARGS(tensor, ret_strides);
  *ret_strides = from_handle(tensor)->strides;
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch_get_stride(AtenTensorHandle tensor, int64_t d, int64_t* ret_stride) {
  TDAOT_CHECK_ARGS(tensor, ret_stride);
  const Tensor& t = *from_handle(tensor);
  if (d < 0) d += t.ndim;
  if (d < 0 || d >= t.ndim) return fail("dim out of range");
  *ret_stride = t.strides[d];
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch_get_dtype(AtenTensorHandle tensor, int32_t* ret_dtype) {
  TDAOT_CHECK_ARGS(tensor, ret_dtype);
  *ret_dtype = from_handle(tensor)->dtype;
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch_get_device_type(AtenTensorHandle tensor, int32_t* ret_device_type) {
  TDAOT_CHECK_ARGS(tensor, ret_device_type);
  *ret_device_type = kDeviceCpu;
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch_get_device_index(AtenTensorHandle tensor, int32_t* ret_device_index) {
  TDAOT_CHECK_ARGS(tensor, ret_device_index);
  *ret_device_index = from_handle(tensor)->device_index;
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch_get_layout(AtenTensorHandle tensor, int32_t* ret_layout) {
  TDAOT_CHECK_ARGS(tensor, ret_layout);
  *ret_layout = kLayoutStrided;
  return AOTI_TORCH_SUCCESS;
}

}  // extern "C"
