// The minimal-arrayref entry points of a compiled model library (arrayref.h).
#include "runtime/arrayref.h"

#include <dlfcn.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include <cstring>
#include <type_traits>

#include "tdaot/errors.h"
#include "tdaot/manifest.h"
#include "tdaot/types.h"

namespace tdaot::detail {

std::unique_ptr<ArrayrefLibrary> ArrayrefLibrary::open(const std::string& path) {
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    throw Error("cannot load '" + path + "': " + (why != nullptr ? why : "unknown error"));
  }
  std::unique_ptr<ArrayrefLibrary> library(new ArrayrefLibrary(handle));
  const auto find = [handle](auto& entry, const char* name) {
    entry = reinterpret_cast<std::remove_reference_t<decltype(entry)>>(::dlsym(handle, name));
    return entry != nullptr;
  };
  if (!find(library->run, "AOTInductorModelRunMinimalArrayrefInterfaceV2") ||
      !find(library->create, "AOTInductorModelCreateV2") ||
      !find(library->destroy, "AOTInductorModelDelete") ||
      !find(library->num_outputs, "AOTInductorModelGetNumOutputs")) {
    return nullptr;  // closes the library again
  }
  find(library->last_error, "AOTInductorGetLastError");
  find(library->update_constants, "AOTInductorModelUpdateConstantsMapV2");
  return library;
}

ArrayrefLibrary::~ArrayrefLibrary() { ::dlclose(handle_); }

AOTInductorModelHandle ArrayrefLibrary::new_instance() const {
  AOTInductorModelHandle handle = nullptr;
  if (create(&handle, nullptr, 0) != AOTI_RUNTIME_SUCCESS || handle == nullptr) {
    throw Error("could not create a model instance: " + error_text());
  }
  return handle;
}

std::string ArrayrefLibrary::error_text() const {
  const char* message = nullptr;
  if (last_error == nullptr || last_error(&message) != AOTI_RUNTIME_SUCCESS ||
      message == nullptr || *message == '\0') {
    return "no message";
  }
  return message;
}

InstancePool::InstancePool(const ArrayrefLibrary& library, int count) : library_(library) {
  try {
    for (int i = 0; i < count; ++i) all_.push_back(library.new_instance());
  } catch (...) {
    for (AOTInductorModelHandle handle : all_) library_.destroy(handle);
    throw;
  }
  generations_.assign(all_.size(), 0);
  for (size_t i = 0; i < all_.size(); ++i) free_.push_back(i);
}

InstancePool::~InstancePool() {
  for (AOTInductorModelHandle handle : all_) library_.destroy(handle);
}

InstancePool::Lease::Lease(const InstancePool& pool) : pool_(pool) {
  std::unique_lock<std::mutex> lock(pool.mutex_);
  pool.returned_.wait(lock, [&] { return !pool.free_.empty(); });
  // The longest-free one, so sequential calls cycle through every instance (and warm-up
  // reaches each); the capacity stays, so returning one never allocates.
  index_ = pool.free_.front();
  pool.free_.erase(pool.free_.begin());
}

InstancePool::Lease::~Lease() {
  {
    std::lock_guard<std::mutex> lock(pool_.mutex_);
    pool_.free_.push_back(index_);
  }
  pool_.returned_.notify_one();
}

int32_t aoti_dtype(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float: return aoti_torch_dtype_float32();
    case c10::ScalarType::Double: return aoti_torch_dtype_float64();
    case c10::ScalarType::Half: return aoti_torch_dtype_float16();
    case c10::ScalarType::BFloat16: return aoti_torch_dtype_bfloat16();
    case c10::ScalarType::Long: return aoti_torch_dtype_int64();
    case c10::ScalarType::Int: return aoti_torch_dtype_int32();
    case c10::ScalarType::Short: return aoti_torch_dtype_int16();
    case c10::ScalarType::Char: return aoti_torch_dtype_int8();
    case c10::ScalarType::Byte: return aoti_torch_dtype_uint8();
    case c10::ScalarType::Bool: return aoti_torch_dtype_bool();
    default: throw Error("internal: dtype " + dtype_name(dtype) + " is not a manifest dtype");
  }
}

AOTInductorArrayRefTensor describe(const at::Tensor& tensor) {
  AOTInductorArrayRefTensor d;
  std::memset(&d, 0, sizeof d);  // the reserved fields must be zero
  d.data = tensor.data_ptr();
  d.numel = tensor.numel();
  d.ndim = static_cast<int32_t>(tensor.dim());
  for (int64_t i = 0; i < tensor.dim(); ++i) {
    d.sizes[i] = tensor.size(i);
    d.strides[i] = tensor.stride(i);
  }
  d.dtype = aoti_dtype(tensor.scalar_type());
  d.device_type = aoti_torch_device_type_cpu();
  d.device_idx = 0;
  return d;
}

bool in_bounds(const AOTInductorArrayRefTensor& d) {
  if (d.ndim < 0 || d.ndim > AOTI_ARRAYREF_TENSOR_MAX_DIMS) return false;
  int64_t last = 0;
  for (int32_t i = 0; i < d.ndim; ++i) {
    if (d.sizes[i] == 0) return true;
    if (d.sizes[i] < 0 || d.strides[i] < 0) return false;
    last += (d.sizes[i] - 1) * d.strides[i];
  }
  return last < d.numel;
}

bool same_shape(const AOTInductorArrayRefTensor& d, const at::Tensor& tensor) {
  if (d.ndim != tensor.dim() || d.dtype != aoti_dtype(tensor.scalar_type())) return false;
  for (int32_t i = 0; i < d.ndim; ++i) {
    if (d.sizes[i] != tensor.size(i)) return false;
  }
  return true;
}

void copy_view(void* destination, const AOTInductorArrayRefTensor& src, size_t element) {
  char* dst = static_cast<char*>(destination);
  const auto bytes = static_cast<int64_t>(element);
  const int32_t n = src.ndim;
  int64_t total = 1;
  bool contiguous = true;
  for (int32_t d = n - 1; d >= 0; --d) {
    if (src.sizes[d] != 1 && src.strides[d] != total) contiguous = false;
    total *= src.sizes[d];
  }
  const char* base = static_cast<const char*>(src.data);
  if (total == 0) return;
  if (contiguous || n == 0) {
    std::memcpy(dst, base, static_cast<size_t>(total * bytes));
    return;
  }
  // Row by row along the last dim; `index` counts through the others like an odometer.
  int64_t index[AOTI_ARRAYREF_TENSOR_MAX_DIMS] = {};
  const int64_t row = src.sizes[n - 1];
  const int64_t step = src.strides[n - 1];
  for (int64_t done = 0; done < total; done += row) {
    int64_t offset = 0;
    for (int32_t d = 0; d < n - 1; ++d) offset += index[d] * src.strides[d];
    if (step == 1) {
      std::memcpy(dst, base + offset * bytes, static_cast<size_t>(row * bytes));
      dst += row * bytes;
    } else {
      for (int64_t j = 0; j < row; ++j, dst += bytes) {
        std::memcpy(dst, base + (offset + j * step) * bytes, element);
      }
    }
    for (int32_t d = n - 2; d >= 0; --d) {
      if (++index[d] < src.sizes[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace tdaot::detail
