// Internal: the plain C entry points of an AOTInductor model library built with the minimal
// arrayref interface (torch 2.13's aoti_runtime/interface.h), declared here without any torch
// header so the torch-free core and the lite runtime can call them. The types have torch's exact
// layout (tests/cpp checks it against torch's declarations); every function is looked up with
// dlsym in one model library, never linked.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tdaot::detail::aoti {

struct ModelOpaque;
using ModelHandle = ModelOpaque*;
using RuntimeError = int32_t;
constexpr RuntimeError kSuccess = 0;

// AOTI_ARRAYREF_TENSOR_MAX_DIMS
constexpr int kMaxDims = 8;

// AOTInductorArrayRefTensor: a flat descriptor of a CPU tensor's memory.
struct ArrayRefTensor {
  void* data;
  int64_t numel;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims];
  int32_t ndim;
  int32_t dtype;
  int32_t device_type;
  int32_t device_idx;
  int64_t reserved[4];
};

// AOTInductorConstantMapEntry: a constant's name and its tensor handle (AtenTensorHandle).
struct ConstantMapEntry {
  const char* name;
  void* handle;
};

using CreateV2 = RuntimeError (*)(ModelHandle*, const ConstantMapEntry*, size_t);
using Delete = RuntimeError (*)(ModelHandle);
using GetNumOutputs = RuntimeError (*)(ModelHandle, size_t*);
using RunMinimalArrayrefV2 = RuntimeError (*)(ModelHandle, int32_t, const ArrayRefTensor*, int32_t,
                                              ArrayRefTensor*);
using UpdateConstantsMapV2 = RuntimeError (*)(ModelHandle, const ConstantMapEntry*, int32_t);
using GetLastError = RuntimeError (*)(const char**);

// The container entry points a lite model's constant table is read through (lite/weights.cpp).
struct ContainerOpaque;
using ContainerHandle = ContainerOpaque*;
using ContainerCreateWithDevice = RuntimeError (*)(ContainerHandle*, size_t, const char*,
                                                   const char*);
using ContainerDelete = RuntimeError (*)(ContainerHandle);
using ContainerGetNumConstants = RuntimeError (*)(ContainerHandle, size_t*);
// GetConstantName and GetConstantOriginalFQN.
using ContainerGetConstantText = RuntimeError (*)(ContainerHandle, size_t, const char**);
using ContainerExtractConstantsMapEntries = RuntimeError (*)(ContainerHandle,
                                                             const ConstantMapEntry**, size_t*,
                                                             bool);

}  // namespace tdaot::detail::aoti
