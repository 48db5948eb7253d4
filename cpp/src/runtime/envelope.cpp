// The safety envelope of a tdaot::Session (envelope.h).
#include "runtime/envelope.h"

#include <ATen/Dispatch.h>
#include <ATen/Functions.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/policy_impl.h"

namespace tdaot::detail {
namespace {

// Runs `body` with scalar_t bound to the floating dtype of `tensor`.
#define TDAOT_FLOATING(tensor, body) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, (tensor).scalar_type(), "tdaot_envelope", body)

bool direct(const at::Tensor& tensor) { return tensor.is_cpu() && tensor.is_contiguous(); }

bool all_finite(const at::Tensor& tensor) {
  if (!at::isFloatingType(tensor.scalar_type())) return true;
  if (!direct(tensor)) return at::isfinite(tensor).all().item<bool>();
  bool finite = true;
  TDAOT_FLOATING(tensor, [&] {
    const scalar_t* data = tensor.const_data_ptr<scalar_t>();
    const int64_t n = tensor.numel();
    for (int64_t i = 0; i < n && finite; ++i) finite = std::isfinite(static_cast<double>(data[i]));
  });
  return finite;
}

// Copies `from` into `to` (same dtype and size), by memory when both are CPU and contiguous.
void copy_into(at::Tensor& to, const at::Tensor& from) {
  if (direct(to) && direct(from)) {
    std::memcpy(to.mutable_data_ptr(), from.const_data_ptr(), from.nbytes());
  } else {
    to.copy_(from);
  }
}

}  // namespace

Envelope::Envelope(const Manifest& manifest, int64_t batch)
    : batch_(batch), fresh_(static_cast<size_t>(batch), 1) {
  for (const TensorSpec& spec : manifest.outputs) {
    Output output;
    output.previous =
        at::empty(batched_shape(batch, spec.shape), at::TensorOptions().dtype(to_scalar_type(spec.dtype)));
    const int64_t row = batch > 0 ? output.previous.numel() / batch : 0;
    output.rest.assign(static_cast<size_t>(row), 0.0);
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

void Envelope::forget_row(int64_t row) {
  fresh_[static_cast<size_t>(row)] = 1;
  for (Output& output : outputs_) {
    at::Tensor& previous = output.previous;
    const size_t width = output.rest.size();
    if (!at::isFloatingType(previous.scalar_type())) {
      auto* bytes = static_cast<char*>(previous.mutable_data_ptr());
      std::memset(bytes + row * width * previous.element_size(), 0, width * previous.element_size());
      continue;
    }
    TDAOT_FLOATING(previous, [&] {
      scalar_t* data = previous.mutable_data_ptr<scalar_t>() + row * width;
      for (size_t i = 0; i < width; ++i) data[i] = static_cast<scalar_t>(output.rest[i]);
    });
  }
}

void Envelope::reset() {
  for (int64_t row = 0; row < batch_; ++row) forget_row(row);
}

void Envelope::reset(const at::Tensor& mask) {
  const at::Tensor rows = mask.to(at::kCPU).contiguous();
  const bool* selected = rows.const_data_ptr<bool>();
  for (int64_t row = 0; row < batch_; ++row) {
    if (selected[row]) forget_row(row);
  }
}

bool Envelope::limit(const Output& output, at::Tensor& work) const {
  bool moved = false;
  const size_t width = output.max_delta.size();
  TDAOT_FLOATING(work, [&] {
    scalar_t* data = work.mutable_data_ptr<scalar_t>();
    const scalar_t* previous = output.previous.const_data_ptr<scalar_t>();
    for (int64_t row = 0; row < batch_; ++row) {
      if (fresh_[static_cast<size_t>(row)]) continue;
      const size_t base = static_cast<size_t>(row) * width;
      for (size_t i = 0; i < width; ++i) {
        const double last = static_cast<double>(previous[base + i]);
        const double value = static_cast<double>(data[base + i]);
        const double bounded =
            std::clamp(value, last - output.max_delta[i], last + output.max_delta[i]);
        if (bounded != value) {
          data[base + i] = static_cast<scalar_t>(bounded);
          moved = true;
        }
      }
    }
  });
  return moved;
}

bool Envelope::guard(const std::vector<at::Tensor>& inputs, std::vector<at::Tensor>& outputs) {
  bool finite = true;
  for (const at::Tensor& input : inputs) finite = finite && all_finite(input);
  for (const at::Tensor& output : outputs) finite = finite && all_finite(output);
  if (!finite) {
    for (size_t i = 0; i < outputs.size(); ++i) copy_into(outputs[i], outputs_[i].previous);
    ++counts_.nonfinite;
    return false;
  }
  bool limited = false;
  for (size_t i = 0; i < outputs.size(); ++i) {
    Output& output = outputs_[i];
    if (!output.max_delta.empty()) {
      // Off the CPU fast path the output is limited in a CPU copy, then written back.
      at::Tensor work = direct(outputs[i]) ? outputs[i] : outputs[i].to(at::kCPU).contiguous();
      if (limit(output, work)) {
        limited = true;
        if (!direct(outputs[i])) outputs[i].copy_(work);
      }
    }
    copy_into(output.previous, outputs[i]);
  }
  std::fill(fresh_.begin(), fresh_.end(), 0);
  if (limited) ++counts_.rate_limited;
  return true;
}

}  // namespace tdaot::detail
