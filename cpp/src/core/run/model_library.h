// Internal: a compiled model library's plain C entry points (minimal arrayref interface), one
// RAII model instance, and the copy of a model's output view into caller memory. Torch-free:
// the lite runtime runs every model through it; the full runtime's bound run shares copy_view
// and in_bounds (runtime/arrayref.cpp).
//
// Such a model takes and returns flat ArrayRefTensor descriptors, keeps its intermediates on the
// stack and writes each output descriptor to point at a thread_local buffer of its library, so a
// call allocates nothing; the caller copies the outputs out before the next call.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/run/aoti_interface.h"
#include "tdaot/dtype.h"
#include "tdaot/manifest.h"

namespace tdaot::detail {

class ModelLibrary {
 public:
  // The entry points of the model library at `path` (dlopen-ed with `dlopen_flags`), or nullptr
  // when it does not export AOTInductorModelRunMinimalArrayrefInterfaceV2. Throws tdaot::Error
  // naming the path and the loader's message (an undefined symbol, ...) when it cannot be loaded.
  static std::unique_ptr<ModelLibrary> open(const std::string& path, int dlopen_flags);
  ~ModelLibrary();
  ModelLibrary(const ModelLibrary&) = delete;
  ModelLibrary& operator=(const ModelLibrary&) = delete;

  aoti::CreateV2 create = nullptr;
  aoti::Delete destroy = nullptr;
  aoti::GetNumOutputs num_outputs = nullptr;
  aoti::RunMinimalArrayrefV2 run = nullptr;
  aoti::UpdateConstantsMapV2 update_constants = nullptr;  // null when the library lacks it
  aoti::GetLastError last_error = nullptr;                // null when the library lacks it

  // The library's message for the calling thread's last failed call, for error messages.
  std::string error_text() const;
  const std::string& path() const { return path_; }
  // The library's own exported symbol `name` (its container entry points, ...), or null.
  void* symbol(const char* name) const;

 private:
  ModelLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  void* handle_;
  std::string path_;
};

// One model instance (with its own copy of the constants embedded in the library, unless it was
// made over other constants and `adopted`), deleted with this object, including when a
// constructor that made it throws later on.
class ModelInstance {
 public:
  // Throws tdaot::Error with the library's message when it cannot be created.
  explicit ModelInstance(const ModelLibrary& library, aoti::ModelHandle adopted = nullptr);
  ~ModelInstance();
  ModelInstance(const ModelInstance&) = delete;
  ModelInstance& operator=(const ModelInstance&) = delete;
  aoti::ModelHandle handle() const { return handle_; }

 private:
  const ModelLibrary& library_;
  aoti::ModelHandle handle_ = nullptr;
};

// A descriptor of contiguous memory holding [shape] elements of `dtype` (at most kMaxDims dims).
aoti::ArrayRefTensor describe(void* data, DType dtype, const std::vector<int64_t>& shape);

// Whether the view `d` reads only elements [0, d.numel) of its data.
bool in_bounds(const aoti::ArrayRefTensor& d);

// Whether `d` has exactly `dtype` and `shape`.
bool same_shape(const aoti::ArrayRefTensor& d, DType dtype, const std::vector<int64_t>& shape);

// Where one output of a call goes: contiguous memory for [shape] elements of `dtype` (the full
// shape, batch dim included).
struct OutputSlot {
  void* data;
  DType dtype;
  std::vector<int64_t> shape;
};

// The outputs of one minimal-arrayref call, checked and copied out, as every bound run does
// (the lite Binding, the full runtime's Binding and its pooled instances): view out[i] must have
// the dtype and shape of slots[i] and read within its bounds, and is copied into slots[i] at once
// (the views point into the library's thread_local arrays, which this thread's next call
// reuses). Allocates nothing while the outputs are right. Returns "" or the problem, naming the
// output by the key of specs[i] (the manifest's outputs): "returned output 'loc' of shape
// [1, 3] and dtype code 6, but the manifest says float32 [1, 2]", or a view past its buffer.
std::string copy_outputs(const aoti::ArrayRefTensor* out, const std::vector<OutputSlot>& slots,
                         const std::vector<TensorSpec>& specs);

// Copies the view `src` (within bounds) into the contiguous memory `dst` with elements of
// `element` bytes. A model's output may be a strided view of a larger buffer (two outputs sliced
// from one result): the descriptor's strides are followed; a contiguous one is one memcpy.
// Allocates nothing.
void copy_view(void* dst, const aoti::ArrayRefTensor& src, size_t element);

}  // namespace tdaot::detail
