"""The dynamic symbols the lite runtime (``tdaot::lite``, no libtorch) provides to a model library.

A model compiled with ``aot_inductor.link_libtorch = False`` leaves torch's C shim functions
(``aoti_torch_*``) and SLEEF's vector math (``Sleef_*``) undefined; the process that loads it
must provide them. The lite runtime implements the shim functions listed here itself
(``cpp/src/lite/shim/``) and links the system's SLEEF (Debian ``libsleef3``), so a model runs
on it when every symbol it needs (read from its ELF file at build time) is provided.

This list is checked against the exports of the built ``libtdaot_lite.so`` by a test, so the
build side and the runtime cannot drift apart. It is not a list of what torch's shim offers.
"""

from __future__ import annotations

SHIM_FUNCTIONS: frozenset[str] = frozenset(
    {
        # Constants: dtype, device and layout codes (c10's numbers).
        "aoti_torch_device_type_cpu",
        "aoti_torch_device_type_cuda",
        "aoti_torch_dtype_bfloat16",
        "aoti_torch_dtype_bool",
        "aoti_torch_dtype_element_size",
        "aoti_torch_dtype_float16",
        "aoti_torch_dtype_float32",
        "aoti_torch_dtype_float64",
        "aoti_torch_dtype_int16",
        "aoti_torch_dtype_int32",
        "aoti_torch_dtype_int64",
        "aoti_torch_dtype_int8",
        "aoti_torch_dtype_uint8",
        "aoti_torch_layout_strided",
        # Grad mode, a per-thread flag.
        "aoti_torch_grad_mode_is_enabled",
        "aoti_torch_grad_mode_set_enabled",
        "aoti_torch_check",
        # Handles: made over a blob, allocated, cloned, shared, viewed, freed.
        "aoti_torch__reinterpret_tensor",
        "aoti_torch_clone",
        "aoti_torch_create_tensor_from_blob",
        "aoti_torch_create_tensor_from_blob_v2",
        "aoti_torch_delete_tensor_object",
        "aoti_torch_empty_strided",
        "aoti_torch_new_tensor_handle",
        # Getters.
        "aoti_torch_get_data_ptr",
        "aoti_torch_get_device_index",
        "aoti_torch_get_device_type",
        "aoti_torch_get_dim",
        "aoti_torch_get_dtype",
        "aoti_torch_get_layout",
        "aoti_torch_get_numel",
        "aoti_torch_get_size",
        "aoti_torch_get_sizes",
        "aoti_torch_get_storage_offset",
        "aoti_torch_get_storage_size",
        "aoti_torch_get_stride",
        "aoti_torch_get_strides",
    }
)

# SLEEF's functions come from the system's libsleef, which the lite runtime links.
SLEEF_PREFIX = "Sleef_"


def provided(symbol: str) -> bool:
    """Whether the lite runtime provides ``symbol`` to a model library."""
    return symbol in SHIM_FUNCTIONS or symbol.startswith(SLEEF_PREFIX)
