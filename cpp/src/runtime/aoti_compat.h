// Internal: AOTInductor's C interface (aoti_runtime/interface.h) as tdaot uses it, on every torch
// it builds against (2.11 to 2.13). torch 2.13 added the C-ABI-safe entry points of the minimal
// arrayref interface (AOTInductorArrayRefTensor, ...RunMinimalArrayrefInterfaceV2,
// ...ModelCreateV2, ...UpdateConstantsMapV2, AOTInductorGetLastError). On an older torch they are
// declared here, with 2.13's signatures, only so that arrayref.cpp compiles: tdaot looks them up
// with dlsym in each model library, and a library compiled by an older torch lacks them, so
// ArrayrefLibrary::open returns null and every model takes AOTInductor's runner.
#pragma once

#include <torch/csrc/inductor/aoti_runtime/interface.h>

#include <cstdint>

#ifndef AOTI_ARRAYREF_TENSOR_MAX_DIMS
#define TDAOT_AOTI_ARRAYREF_DECLARED_HERE 1
#define AOTI_ARRAYREF_TENSOR_MAX_DIMS 8

struct AOTInductorArrayRefTensor {
  void* data;
  int64_t numel;
  int64_t sizes[AOTI_ARRAYREF_TENSOR_MAX_DIMS];
  int64_t strides[AOTI_ARRAYREF_TENSOR_MAX_DIMS];
  int32_t ndim;
  int32_t dtype;
  int32_t device_type;
  int32_t device_idx;
  int64_t reserved[4];
};

extern "C" {
AOTIRuntimeError AOTInductorModelCreateV2(AOTInductorModelHandle* model_handle,
                                          const AOTInductorConstantMapEntry* pairs,
                                          size_t num_pairs);
AOTIRuntimeError AOTInductorModelUpdateConstantsMapV2(AOTInductorModelHandle model_handle,
                                                      const AOTInductorConstantMapEntry* pairs,
                                                      int32_t num_pairs);
AOTIRuntimeError AOTInductorGetLastError(const char** error_msg);
AOTIRuntimeError AOTInductorModelRunMinimalArrayrefInterfaceV2(
    AOTInductorModelHandle model_handle, int32_t num_inputs,
    const AOTInductorArrayRefTensor* inputs, int32_t num_outputs,
    AOTInductorArrayRefTensor* outputs);
}  // extern "C"
#endif

static_assert(sizeof(AOTInductorArrayRefTensor) == 192,
              "AOTInductorArrayRefTensor must keep torch 2.13's layout");
