// Internal: the recurrent carry's buffers (core/run/carry.h) as a Session's or Binding's
// at::Tensor inputs and outputs. Host tensors are written with memcpy and memset (a Binding's
// run stays allocation-free), CUDA tensors with copy_ and fill_; the rows of a reset come from
// a bool mask [batch] on the tensors' device (check_reset_mask).
#pragma once

#include <ATen/Tensor.h>

#include <vector>

#include "core/run/carry.h"

namespace tdaot::detail {

class TensorBuffers final : public Carry::Buffers {
 public:
  // Both kept by reference.
  TensorBuffers(std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs)
      : inputs_(inputs), outputs_(&outputs) {}
  // For a reset, which reads no output.
  explicit TensorBuffers(std::vector<at::Tensor>& inputs) : inputs_(inputs) {}

  void copy(size_t input, size_t output) override;
  void fill(size_t input, bool one) override;
  void fill_rows(size_t input, bool one) override;
  // The rows fill_rows writes: where `mask` is true; kept by reference.
  void set_rows(const at::Tensor& mask) noexcept { mask_ = &mask; }

 private:
  std::vector<at::Tensor>& inputs_;
  const std::vector<at::Tensor>* outputs_ = nullptr;
  const at::Tensor* mask_ = nullptr;
};

}  // namespace tdaot::detail
