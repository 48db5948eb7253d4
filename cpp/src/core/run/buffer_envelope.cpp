// The safety envelope over raw CPU buffers (buffer_envelope.h).
#include "core/run/buffer_envelope.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "tdaot/errors.h"

namespace tdaot::detail {
namespace {

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// bfloat16 is the upper half of a float32.
float from_bf16(uint16_t bits) {
  const uint32_t wide = uint32_t{bits} << 16;
  float value;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}

uint16_t to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  bits += 0x7FFF + ((bits >> 16) & 1);  // round to nearest even (values here are finite)
  return static_cast<uint16_t>(bits >> 16);
}

// Whether every element of a floating buffer is finite; other dtypes always are.
bool all_finite(const void* data, DType dtype, int64_t n) {
  switch (dtype) {
    case DType::Float32: {
      const auto* v = static_cast<const float*>(data);
      for (int64_t i = 0; i < n; ++i) {
        if (!std::isfinite(v[i])) return false;
      }
      return true;
    }
    case DType::Float64: {
      const auto* v = static_cast<const double*>(data);
      for (int64_t i = 0; i < n; ++i) {
        if (!std::isfinite(v[i])) return false;
      }
      return true;
    }
    case DType::Float16:
    case DType::BFloat16: {
      // An all-ones exponent is an infinity or a NaN.
      const uint16_t mask = dtype == DType::Float16 ? 0x7C00 : 0x7F80;
      const auto* v = static_cast<const uint16_t*>(data);
      for (int64_t i = 0; i < n; ++i) {
        if ((v[i] & mask) == mask) return false;
      }
      return true;
    }
    default: return true;
  }
}

// IEEE binary16, by hand: the core is torch-free, so c10::Half is not at hand.
float from_f16(uint16_t half) {
  const uint32_t sign = uint32_t{half & 0x8000u} << 16;
  uint32_t exponent = (half >> 10) & 0x1Fu;
  uint32_t mantissa = half & 0x3FFu;
  uint32_t bits = sign;
  if (exponent == 0x1F) {
    bits |= 0x7F800000u | (mantissa << 13);  // infinity or NaN
  } else if (exponent != 0) {
    bits |= ((exponent + 127 - 15) << 23) | (mantissa << 13);
  } else if (mantissa != 0) {
    // A subnormal: normalise, one exponent step down per shift.
    exponent = 127 - 15 + 1;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits |= (exponent << 23) | ((mantissa & 0x3FFu) << 13);
  }
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

uint16_t to_f16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  bits &= 0x7FFFFFFFu;
  if (bits >= 0x47800000u) {  // 2^16 and up (values here are finite): infinity
    return static_cast<uint16_t>(sign | 0x7C00u);
  }
  if (bits < 0x38800000u) {  // below 2^-14: a subnormal, in units of 2^-24, nearest even
    float magnitude;
    std::memcpy(&magnitude, &bits, sizeof magnitude);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(magnitude * 16777216.0f)));
  }
  // Rebias the exponent (127 -> 15) and round the mantissa to 10 bits, nearest even; a carry
  // into the exponent is right (up to infinity).
  uint32_t half = (bits - 0x38000000u) >> 13;
  const uint32_t dropped = bits & 0x1FFFu;
  if (dropped > 0x1000u || (dropped == 0x1000u && (half & 1u) != 0)) ++half;
  return static_cast<uint16_t>(sign | half);
}

double load(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::Float32: return static_cast<const float*>(data)[i];
    case DType::Float64: return static_cast<const double*>(data)[i];
    case DType::BFloat16: return from_bf16(static_cast<const uint16_t*>(data)[i]);
    case DType::Float16: return from_f16(static_cast<const uint16_t*>(data)[i]);
    default: return 0.0;
  }
}

void store(void* data, DType dtype, int64_t i, double value) {
  switch (dtype) {
    case DType::Float32: static_cast<float*>(data)[i] = static_cast<float>(value); break;
    case DType::Float64: static_cast<double*>(data)[i] = value; break;
    case DType::BFloat16:
      static_cast<uint16_t*>(data)[i] = to_bf16(static_cast<float>(value));
      break;
    case DType::Float16:
      static_cast<uint16_t*>(data)[i] = to_f16(static_cast<float>(value));
      break;
    default: break;
  }
}

}  // namespace

double load_element(const void* data, DType dtype, int64_t i) { return load(data, dtype, i); }
void store_element(void* data, DType dtype, int64_t i, double value) { store(data, dtype, i, value); }
bool elements_finite(const void* data, DType dtype, int64_t n) { return all_finite(data, dtype, n); }

BufferEnvelope::BufferEnvelope(const Manifest& manifest, int64_t batch)
    : batch_(batch), fresh_(static_cast<size_t>(batch), 1), limited_rows_(static_cast<size_t>(batch), 0) {
  for (const TensorSpec& spec : manifest.inputs) {
    input_dtypes_.push_back(spec.dtype);
    input_numel_.push_back(batch * numel(spec.shape));
  }
  for (const TensorSpec& spec : manifest.outputs) {
    Buffer output;
    output.dtype = spec.dtype;
    output.row = numel(spec.shape);
    output.previous.assign(static_cast<size_t>(batch * output.row) * element_size(spec.dtype), 0);
    output.rest.assign(static_cast<size_t>(output.row), 0.0);
    const Signal* signal = manifest.contract ? manifest.contract->signal(spec.key) : nullptr;
    // An input's signal of the same key says nothing about the output.
    if (signal != nullptr && manifest.contract->outputs.count(spec.key) != 0) {
      for (size_t i = 0; i < output.rest.size(); ++i) output.rest[i] = signal->rest(i);
      if (signal->max_delta.present()) {
        for (size_t i = 0; i < output.rest.size(); ++i) {
          output.max_delta.push_back(signal->max_delta[i]);
        }
      }
    }
    outputs_.push_back(std::move(output));
  }
  reset();
}

void BufferEnvelope::forget_row(int64_t row) {
  fresh_[static_cast<size_t>(row)] = 1;
  for (Buffer& output : outputs_) {
    void* data = output.previous.data();
    if (!is_floating(output.dtype)) {
      const size_t bytes = static_cast<size_t>(output.row) * element_size(output.dtype);
      std::memset(output.previous.data() + static_cast<size_t>(row) * bytes, 0, bytes);
      continue;
    }
    for (int64_t i = 0; i < output.row; ++i) {
      store(data, output.dtype, row * output.row + i, output.rest[static_cast<size_t>(i)]);
    }
  }
}

void BufferEnvelope::reset() {
  for (int64_t row = 0; row < batch_; ++row) forget_row(row);
}

void BufferEnvelope::reset(const std::vector<bool>& mask) {
  for (int64_t row = 0; row < batch_; ++row) {
    if (mask[static_cast<size_t>(row)]) forget_row(row);
  }
}

bool BufferEnvelope::limit(Buffer& output, void* data) {
  bool moved = false;
  const auto width = static_cast<int64_t>(output.max_delta.size());
  for (int64_t row = 0; row < batch_; ++row) {
    if (fresh_[static_cast<size_t>(row)]) continue;
    for (int64_t i = 0; i < width; ++i) {
      const int64_t at = row * width + i;
      const double last = load(output.previous.data(), output.dtype, at);
      const double value = load(data, output.dtype, at);
      const double delta = output.max_delta[static_cast<size_t>(i)];
      const double bounded = std::clamp(value, last - delta, last + delta);
      if (bounded != value) {
        store(data, output.dtype, at, bounded);
        moved = true;
        limited_rows_[static_cast<size_t>(row)] = 1;
      }
    }
  }
  return moved;
}

bool BufferEnvelope::guard(const std::vector<const void*>& inputs,
                           const std::vector<void*>& outputs) {
  bool finite = true;
  for (size_t i = 0; i < inputs.size() && finite; ++i) {
    finite = all_finite(inputs[i], input_dtypes_[i], input_numel_[i]);
  }
  for (size_t i = 0; i < outputs.size() && finite; ++i) {
    finite = all_finite(outputs[i], outputs_[i].dtype, batch_ * outputs_[i].row);
  }
  if (!finite) {
    std::fill(limited_rows_.begin(), limited_rows_.end(), 0);
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::memcpy(outputs[i], outputs_[i].previous.data(), outputs_[i].previous.size());
    }
    ++counts_.nonfinite;
    return false;
  }
  bool limited = false;
  std::fill(limited_rows_.begin(), limited_rows_.end(), 0);
  for (size_t i = 0; i < outputs.size(); ++i) {
    Buffer& output = outputs_[i];
    if (!output.max_delta.empty() && limit(output, outputs[i])) limited = true;
    std::memcpy(output.previous.data(), outputs[i], output.previous.size());
  }
  std::fill(fresh_.begin(), fresh_.end(), 0);
  if (limited) ++counts_.rate_limited;
  return true;
}

}  // namespace tdaot::detail
