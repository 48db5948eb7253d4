// A compiled model library's minimal arrayref entry points, its instances, and the output copy
// (model_library.h).
#include "core/run/model_library.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/error_text.h"
#include "core/manifest/manifest_internal.h"
#include "tdaot/errors.h"

namespace tdaot::detail {

std::unique_ptr<ModelLibrary> ModelLibrary::open(const std::string& path, int dlopen_flags) {
  void* handle = ::dlopen(path.c_str(), dlopen_flags);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    throw Error("cannot load '" + path + "': " + (why != nullptr ? why : "unknown error"));
  }
  std::unique_ptr<ModelLibrary> library(new ModelLibrary(handle, path));
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

ModelLibrary::~ModelLibrary() { ::dlclose(handle_); }

void* ModelLibrary::symbol(const char* name) const { return ::dlsym(handle_, name); }

std::string ModelLibrary::error_text() const {
  const char* message = nullptr;
  if (last_error == nullptr || last_error(&message) != aoti::kSuccess || message == nullptr ||
      *message == '\0') {
    return "no message";
  }
  return without_backtrace(message);
}

ModelInstance::ModelInstance(const ModelLibrary& library, aoti::ModelHandle adopted)
    : library_(library), handle_(adopted) {
  if (handle_ == nullptr &&
      (library.create(&handle_, nullptr, 0) != aoti::kSuccess || handle_ == nullptr)) {
    throw Error("could not create a model instance of '" + library.path() +
                "': " + library.error_text());
  }
}

ModelInstance::~ModelInstance() { library_.destroy(handle_); }

aoti::ArrayRefTensor describe(void* data, DType dtype, const std::vector<int64_t>& shape) {
  aoti::ArrayRefTensor d;
  std::memset(&d, 0, sizeof d);  // the reserved fields must be zero
  d.data = data;
  d.ndim = static_cast<int32_t>(shape.size());
  int64_t stride = 1;
  for (int32_t i = d.ndim - 1; i >= 0; --i) {
    d.sizes[i] = shape[static_cast<size_t>(i)];
    d.strides[i] = stride;
    stride *= shape[static_cast<size_t>(i)];
  }
  d.numel = stride;
  d.dtype = static_cast<int32_t>(dtype);
  return d;  // device_type 0: the CPU, device_idx 0
}

bool in_bounds(const aoti::ArrayRefTensor& d) {
  if (d.ndim < 0 || d.ndim > aoti::kMaxDims) return false;
  int64_t last = 0;
  for (int32_t i = 0; i < d.ndim; ++i) {
    if (d.sizes[i] == 0) return true;
    if (d.sizes[i] < 0 || d.strides[i] < 0) return false;
    last += (d.sizes[i] - 1) * d.strides[i];
  }
  return last < d.numel;
}

bool same_shape(const aoti::ArrayRefTensor& d, DType dtype, const std::vector<int64_t>& shape) {
  if (d.ndim != static_cast<int32_t>(shape.size()) || d.dtype != static_cast<int32_t>(dtype)) {
    return false;
  }
  for (int32_t i = 0; i < d.ndim; ++i) {
    if (d.sizes[i] != shape[static_cast<size_t>(i)]) return false;
  }
  return true;
}

void copy_view(void* destination, const aoti::ArrayRefTensor& src, size_t element) {
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
  int64_t index[aoti::kMaxDims] = {};
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

std::string copy_outputs(const aoti::ArrayRefTensor* out, const std::vector<OutputSlot>& slots,
                         const std::vector<TensorSpec>& specs) {
  for (size_t i = 0; i < slots.size(); ++i) {
    const OutputSlot& slot = slots[i];
    if (!same_shape(out[i], slot.dtype, slot.shape)) {
      const std::vector<int64_t> sizes(out[i].sizes,
                                       out[i].sizes + std::clamp(out[i].ndim, 0, aoti::kMaxDims));
      return "returned output '" + specs[i].key + "' of shape " + format_shape(sizes) +
             " and dtype code " + std::to_string(out[i].dtype) + ", but the manifest says " +
             dtype_name(slot.dtype) + " " + format_shape(slot.shape);
    }
    if (!in_bounds(out[i])) {
      return "returned output '" + specs[i].key + "' as a view reading past the " +
             std::to_string(out[i].numel) + " elements of its buffer";
    }
    copy_view(slot.data, out[i], element_size(slot.dtype));
  }
  return {};
}

}  // namespace tdaot::detail
