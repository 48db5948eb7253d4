// Internal: the plain C entry points of a compiled model built with AOTInductor's minimal
// arrayref interface (aot_inductor.use_minimal_arrayref_interface: tdaot's static-batch latency
// models). Such a model takes and returns flat AOTInductorArrayRefTensor descriptors instead of
// tensor handles, keeps its intermediate buffers on the stack (allow_stack_allocation) and
// writes each output into a thread_local array of its library, so a call allocates nothing.
//
// tdaot calls these models only through this interface, never through AOTInductor's container:
// torch 2.13's container path copies each output with ArrayRefTensor::expensiveCopyToTensor,
// which writes the whole remaining buffer (numel of the storage) into a tensor sized for the
// view, past its end when an output is a strided slice of a larger buffer (reproduced: the
// tutorial policy's batch-4 latency model corrupts the heap through the standard loader).
#pragma once

#include <ATen/Tensor.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/run/model_library.h"
#include "runtime/aoti_compat.h"
#include "tdaot/manifest.h"

namespace tdaot::detail {

class ArrayrefLibrary {
 public:
  // The entry points of the model library at `path` (dlopen-ed, RTLD_NOW | RTLD_LOCAL, by the
  // core's ModelLibrary, which the lite runtime opens models with), or nullptr when it does not
  // export AOTInductorModelRunMinimalArrayrefInterfaceV2 (a model built without the interface).
  // Throws tdaot::Error naming the path when it cannot be loaded.
  static std::unique_ptr<ArrayrefLibrary> open(const std::string& path);
  ~ArrayrefLibrary();
  ArrayrefLibrary(const ArrayrefLibrary&) = delete;
  ArrayrefLibrary& operator=(const ArrayrefLibrary&) = delete;

  // The core's entry points with torch's declared types (the same addresses).
  // A model instance with the constants embedded in the library (its own copy of them).
  decltype(&AOTInductorModelCreateV2) create = nullptr;
  decltype(&AOTInductorModelDelete) destroy = nullptr;
  decltype(&AOTInductorModelGetNumOutputs) num_outputs = nullptr;
  decltype(&AOTInductorModelRunMinimalArrayrefInterfaceV2) run = nullptr;
  // Replaces an instance's constants (weights.h); null when the library lacks it.
  decltype(&AOTInductorModelUpdateConstantsMapV2) update_constants = nullptr;
  // The message of the calling thread's last failed call; null when the library lacks it.
  decltype(&AOTInductorGetLastError) last_error = nullptr;

  // A new model instance; throws tdaot::Error with the library's message when that fails.
  AOTInductorModelHandle new_instance() const;
  // The library's message for the calling thread's last failed call, for error messages.
  std::string error_text() const { return library_->error_text(); }

 private:
  explicit ArrayrefLibrary(std::unique_ptr<ModelLibrary> library);
  std::unique_ptr<ModelLibrary> library_;  // owns the dlopen-ed library
};

// One model instance owned by its holder: deleted with it, also when the constructor that made
// it throws afterwards (a raw handle member would then leak, with its copy of the weights).
struct OwnedInstance {
  OwnedInstance() = default;
  ~OwnedInstance() {
    if (handle != nullptr) library->destroy(handle);
  }
  OwnedInstance(const OwnedInstance&) = delete;
  OwnedInstance& operator=(const OwnedInstance&) = delete;
  const ArrayrefLibrary* library = nullptr;
  AOTInductorModelHandle handle = nullptr;
};

// `count` model instances of one library for concurrent callers: a call takes a free one and
// blocks while none is (as AOTInductor's container does with its runners).
class InstancePool {
 public:
  InstancePool(const ArrayrefLibrary& library, int count);
  ~InstancePool();
  InstancePool(const InstancePool&) = delete;
  InstancePool& operator=(const InstancePool&) = delete;

  // A free instance, returned to the pool when the lease ends. Its holder alone may replace
  // the instance or its constants (weights.h), recording the weights generation it now has.
  class Lease {
   public:
    explicit Lease(const InstancePool& pool);
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    AOTInductorModelHandle& handle() const { return pool_.all_[index_]; }
    uint64_t& generation() const { return pool_.generations_[index_]; }

   private:
    const InstancePool& pool_;
    size_t index_;
  };

 private:
  const ArrayrefLibrary& library_;
  // Per instance; each slot is touched only by the holder of its lease (or the destructor).
  mutable std::vector<AOTInductorModelHandle> all_;
  mutable std::vector<uint64_t> generations_;
  mutable std::mutex mutex_;
  mutable std::condition_variable returned_;
  mutable std::vector<size_t> free_;  // indices into all_
};

// The dtype code AOTInductor's C interface uses for a manifest dtype.
int32_t aoti_dtype(c10::ScalarType dtype);

// A descriptor of a contiguous CPU tensor's memory (the caller keeps the tensor alive).
AOTInductorArrayRefTensor describe(const at::Tensor& tensor);

// Where the outputs of a call go: the contiguous tensors `outputs` (kept alive by the caller).
std::vector<OutputSlot> output_slots(const std::vector<at::Tensor>& outputs,
                                     const std::vector<TensorSpec>& specs);

// The core's copy_outputs (core/run/model_library.h) on torch's descriptors, the same layout.
std::string copy_outputs(const std::vector<AOTInductorArrayRefTensor>& out,
                         const std::vector<OutputSlot>& slots, const std::vector<TensorSpec>& specs);

}  // namespace tdaot::detail
