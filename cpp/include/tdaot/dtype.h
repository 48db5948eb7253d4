// The element types of a package's inputs and outputs, as its manifest names them. Torch-free,
// so the lite runtime (tdaot/lite.h) and the shared core use it without libtorch; the values are
// c10::ScalarType's, which are also the dtype codes of AOTInductor's C interface, so the full
// runtime converts with tdaot::to_scalar_type (tdaot/types.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tdaot {

enum class DType : int32_t {
  UInt8 = 0,
  Int8 = 1,
  Int16 = 2,
  Int32 = 3,
  Int64 = 4,
  Float16 = 5,
  Float32 = 6,
  Float64 = 7,
  Bool = 11,
  BFloat16 = 15,
};

// Bytes per element.
constexpr size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::UInt8:
    case DType::Int8:
    case DType::Bool: return 1;
    case DType::Int16:
    case DType::Float16:
    case DType::BFloat16: return 2;
    case DType::Int32:
    case DType::Float32: return 4;
    case DType::Int64:
    case DType::Float64: return 8;
  }
  return 0;
}

// float16, bfloat16, float32 and float64.
constexpr bool is_floating(DType dtype) {
  return dtype == DType::Float16 || dtype == DType::BFloat16 || dtype == DType::Float32 ||
         dtype == DType::Float64;
}

// The DType of C++ element type T (float -> Float32, ...), for typed access to raw buffers.
template <typename T>
struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct dtype_of<int16_t> { static constexpr DType value = DType::Int16; };
template <> struct dtype_of<int8_t> { static constexpr DType value = DType::Int8; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::UInt8; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };

}  // namespace tdaot
