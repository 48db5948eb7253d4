// The minimal-arrayref entry points of a compiled model library (arrayref.h).
#include "runtime/arrayref.h"

#include <dlfcn.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include <cstddef>
#include <cstring>

#include "core/run/model_library.h"
#include "tdaot/errors.h"
#include "tdaot/manifest.h"
#include "tdaot/torch/types.h"

namespace tdaot::detail {
namespace {

// A bound model library is linked without libtorch (aot_inductor.link_libtorch = False, so the
// lite runtime can run it): the process must provide torch's C shim. A program linked to libtorch
// has it in the global scope, but a Python process loads libtorch_cpu with RTLD_LOCAL (through
// torch._C and tdaot._C), so promote the loaded library to RTLD_GLOBAL once before such a dlopen.
void make_torch_shim_global() {
  static const bool done = [] {
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void*>(&aoti_torch_dtype_float32), &info) != 0 &&
        info.dli_fname != nullptr) {
      // RTLD_NOLOAD: the library is already mapped; this only widens its scope (never unloaded).
      ::dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
    }
    return true;
  }();
  (void)done;
}

}  // namespace

std::unique_ptr<ArrayrefLibrary> ArrayrefLibrary::open(const std::string& path) {
  make_torch_shim_global();
  std::unique_ptr<ModelLibrary> library = ModelLibrary::open(path, RTLD_NOW | RTLD_LOCAL);
  if (!library) return nullptr;  // no minimal arrayref interface: closed again
  return std::unique_ptr<ArrayrefLibrary>(new ArrayrefLibrary(std::move(library)));
}

// The core found the entry points with dlsym; a function pointer converted to another function
// pointer type and back is the same pointer, and torch's declarations are the functions' own.
ArrayrefLibrary::ArrayrefLibrary(std::unique_ptr<ModelLibrary> library)
    : library_(std::move(library)) {
  create = reinterpret_cast<decltype(create)>(library_->create);
  destroy = reinterpret_cast<decltype(destroy)>(library_->destroy);
  num_outputs = reinterpret_cast<decltype(num_outputs)>(library_->num_outputs);
  run = reinterpret_cast<decltype(run)>(library_->run);
  update_constants = reinterpret_cast<decltype(update_constants)>(library_->update_constants);
  last_error = reinterpret_cast<decltype(last_error)>(library_->last_error);
}

ArrayrefLibrary::~ArrayrefLibrary() = default;

AOTInductorModelHandle ArrayrefLibrary::new_instance() const {
  AOTInductorModelHandle handle = nullptr;
  if (create(&handle, nullptr, 0) != AOTI_RUNTIME_SUCCESS || handle == nullptr) {
    throw Error("could not create a model instance: " + error_text());
  }
  return handle;
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
    default: throw InternalError("dtype " + dtype_name(dtype) + " is not a manifest dtype");
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

// torch's descriptor and the core's declaration of it (core/run/aoti_interface.h) are one layout:
// the output copy and its bounds check are the core's, shared with the lite runtime.
static_assert(sizeof(AOTInductorArrayRefTensor) == sizeof(aoti::ArrayRefTensor));
static_assert(offsetof(AOTInductorArrayRefTensor, ndim) == offsetof(aoti::ArrayRefTensor, ndim));
static_assert(offsetof(AOTInductorArrayRefTensor, dtype) == offsetof(aoti::ArrayRefTensor, dtype));
static_assert(offsetof(AOTInductorArrayRefTensor, reserved) ==
              offsetof(aoti::ArrayRefTensor, reserved));

std::vector<OutputSlot> output_slots(const std::vector<at::Tensor>& outputs,
                                     const std::vector<TensorSpec>& specs) {
  std::vector<OutputSlot> slots;
  slots.reserve(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    slots.push_back({outputs[i].data_ptr(), specs[i].dtype, outputs[i].sizes().vec()});
  }
  return slots;
}

std::string copy_outputs(const std::vector<AOTInductorArrayRefTensor>& out,
                         const std::vector<OutputSlot>& slots, const std::vector<TensorSpec>& specs) {
  return detail::copy_outputs(reinterpret_cast<const aoti::ArrayRefTensor*>(out.data()), slots,
                              specs);
}

}  // namespace tdaot::detail
