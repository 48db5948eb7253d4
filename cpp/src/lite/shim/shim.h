// The functions of torch's C shim (torch/csrc/inductor/aoti_torch/c/shim.h, torch 2.13) that
// the lite runtime implements (shim.cpp), declared with torch's exact signatures: the
// undefined symbols a batch-specialised model library built with
// aot_inductor.link_libtorch=False resolves against libtdaot_lite.so.
//
// It is not torch's header and declares no other shim function; python/tdaot/builder/
// lite_symbols.py lists the same names (a test compares them with the library's exports).
#pragma once

#include <cstdint>

#include "tensor.h"

#define TDAOT_SHIM_EXPORT __attribute__((__visibility__("default")))

extern "C" {

// Constants: c10's numbers, behind functions as in torch's shim.
TDAOT_SHIM_EXPORT int32_t aoti_torch_device_type_cpu();
// Models compare a handle's device with CUDA's code; no handle here is ever on it.
TDAOT_SHIM_EXPORT int32_t aoti_torch_device_type_cuda();
TDAOT_SHIM_EXPORT int32_t aoti_torch_layout_strided();
TDAOT_SHIM_EXPORT int32_t aoti_torch_dtype_float32();
TDAOT_SHIM_EXPORT int32_t aoti_torch_dtype_float64();
TDAOT_SHIM_EXPORT int32_t aoti_torch_dtype_float16();
TDAOT_SHIM_EXPORT int32_t aoti_torch_dtype_bfloat16();
TDAOT_SHIM_EXPORT int32_t aoti_torch_dtype_int64();
TDAOT_SHIM_EXPORT int32_t aoti_torch_dtype_int32();
TDAOT_SHIM_EXPORT int32_t aoti_torch_dtype_int16();
TDAOT_SHIM_EXPORT int32_t aoti_torch_dtype_int8();
TDAOT_SHIM_EXPORT int32_t aoti_torch_dtype_uint8();
TDAOT_SHIM_EXPORT int32_t aoti_torch_dtype_bool();
TDAOT_SHIM_EXPORT size_t aoti_torch_dtype_element_size(int32_t dtype);

// Grad mode: a per-thread flag (the model turns it off around a run and restores it).
TDAOT_SHIM_EXPORT bool aoti_torch_grad_mode_is_enabled();
TDAOT_SHIM_EXPORT void aoti_torch_grad_mode_set_enabled(bool enabled);

// Runtime checks in a model: throws std::runtime_error with the message when `cond` is false.
TDAOT_SHIM_EXPORT void aoti_torch_check(bool cond, const char* func, const char* file, uint32_t line,
                                        const char* msg);

// Handles.
TDAOT_SHIM_EXPORT AOTITorchError aoti_torch_create_tensor_from_blob(
    void* data, int64_t ndim, const int64_t* sizes_ptr, const int64_t* strides_ptr,
    int64_t storage_offset, int32_t dtype, int32_t device_type, int32_t device_index,
    AtenTensorHandle* ret);
TDAOT_SHIM_EXPORT AOTITorchError aoti_torch_create_tensor_from_blob_v2(
    void* data, int64_t ndim, const int64_t* sizes_ptr, const int64_t* strides_ptr,
    int64_t storage_offset, int32_t dtype, int32_t device_type, int32_t device_index,
    AtenTensorHandle* ret, int32_t layout, const uint8_t* opaque_metadata,
    int64_t opaque_metadata_size);
TDAOT_SHIM_EXPORT AOTITorchError aoti_torch_empty_strided(
    int64_t ndim, const int64_t* sizes_ptr, const int64_t* strides_ptr, int32_t dtype,
    int32_t device_type, int32_t device_index, AtenTensorHandle* ret_new_tensor);
TDAOT_SHIM_EXPORT AOTITorchError aoti_torch_clone(AtenTensorHandle self, AtenTensorHandle* ret);
TDAOT_SHIM_EXPORT AOTITorchError aoti_torch_new_tensor_handle(AtenTensorHandle orig_handle,
                                                              AtenTensorHandle* new_handle);
TDAOT_SHIM_EXPORT AOTITorchError aoti_torch__reinterpret_tensor(
    AtenTensorHandle self, int64_t ndim, const int64_t* sizes_ptr, const int64_t* strides_ptr,
    int64_t storage_offset, AtenTensorHandle* ret_new_tensor);
TDAOT_SHIM_EXPORT AOTITorchError aoti_torch_delete_tensor_object(AtenTensorHandle tensor);

// Getters. Sizes and strides are borrowed: valid while the handle lives.
TDAOT_SHIM_EXPORT AOTITorchError aoti_torch_get_data_ptr(AtenTensorHandle tensor, void** ret_data_ptr);
TDAOT_SHIM_EXPORT AOTITorchError aoti_torch_get_storage_size(AtenTensorHandle tensor, int64_t* ret_size);
TDAOT_SHIM_EXPORT AOTITorchError aoti_torch_get_storage_offset(AtenTensorHandle tensor,
                                                               int64_t* ret_storage_offset);
TDAOT_SHIM_EXPORT AOTITorchError aoti_torch_get_dim(AtenTensorHandle tensor, int64_t* ret_dim);
TDAOT_SHIM_EXPORT AOTITorchError aoti_torch_get_numel(AtenTensorHandle tensor, int64_t* ret_numel);
TDAOT_SHIM_EXPORT AOTITorchError aoti_torch_get_sizes(AtenTensorHandle tensor, int64_t** ret_sizes);
TDAOT_SHIM_EXPORT AOTITorchError aoti_torch_get_size(AtenTensorHandle tensor, int64_t d, int64_t* ret_size);
TDAOT_SHIM_EXPORT AOTITorchError aoti_torch_get_strides(AtenTensorHandle tensor, int64_t** ret_strides);
TDAOT_SHIM_EXPORT AOTITorchError aoti_torch_get_stride(AtenTensorHandle tensor, int64_t d,
                                                       int64_t* ret_stride);
TDAOT_SHIM_EXPORT AOTITorchError aoti_torch_get_dtype(AtenTensorHandle tensor, int32_t* ret_dtype);
TDAOT_SHIM_EXPORT AOTITorchError aoti_torch_get_device_type(AtenTensorHandle tensor,
                                                            int32_t* ret_device_type);
TDAOT_SHIM_EXPORT AOTITorchError aoti_torch_get_device_index(AtenTensorHandle tensor,
                                                             int32_t* ret_device_index);
TDAOT_SHIM_EXPORT AOTITorchError aoti_torch_get_layout(AtenTensorHandle tensor, int32_t* ret_layout);

}  // extern "C"
