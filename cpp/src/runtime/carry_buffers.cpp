// The recurrent carry's buffers as at::Tensor (carry_buffers.h).
#include "runtime/carry_buffers.h"

#include <cstring>

#include "runtime/policy_impl.h"
#include "tdaot/errors.h"

namespace tdaot::detail {

void TensorBuffers::copy(size_t input, size_t output) {
  at::Tensor& state = inputs_[input];
  if (outputs_ == nullptr) throw InternalError("a reset's carry buffers copied an output");
  const at::Tensor& next = (*outputs_)[output];
  // Same dtype and shape (the manifest's); a runner's output need not be contiguous.
  if (state.is_cpu() && next.is_cpu() && next.is_contiguous() && state.is_contiguous()) {
    std::memcpy(state.data_ptr(), next.data_ptr(), state.nbytes());
  } else {
    state.copy_(next);
  }
}

void TensorBuffers::fill(size_t input, bool one) {
  at::Tensor& tensor = inputs_[input];
  if (tensor.is_cpu() && tensor.is_contiguous()) {
    std::memset(tensor.data_ptr(), one ? 1 : 0, tensor.nbytes());  // one: bool true
  } else {
    tensor.fill_(one);
  }
}

void TensorBuffers::fill_rows(size_t input, bool one) {
  if (mask_ == nullptr) throw InternalError("carry buffers filled rows without a mask");
  fill_masked_rows(inputs_[input], *mask_, one);
}

}  // namespace tdaot::detail
