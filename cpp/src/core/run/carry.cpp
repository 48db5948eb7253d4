// The recurrent carry every runner applies (carry.h).
#include "core/run/carry.h"

#include <cstring>

#include "tdaot/errors.h"

namespace tdaot::detail {

Carry::Carry(const Manifest& manifest) {
  if (!manifest.recurrent) return;
  // Manifest::from_json guarantees both keys exist with matching dtype and shape, and a bool
  // is_init that is not state.
  for (const StatePair& pair : manifest.recurrent->state) {
    state_.push_back({*manifest.input_index(pair.input), *manifest.output_index(pair.output)});
  }
  if (!manifest.recurrent->is_init.empty()) {
    is_init_ = *manifest.input_index(manifest.recurrent->is_init);
  }
}

bool Carry::carried(size_t input) const noexcept {
  if (is_init_ == input) return true;
  for (const Pair& pair : state_) {
    if (pair.input == input) return true;
  }
  return false;
}

void Carry::after_step(Buffers& buffers) const {
  for (const Pair& pair : state_) buffers.copy(pair.input, pair.output);
  if (is_init_) buffers.fill(*is_init_, false);
}

void Carry::reset(Buffers& buffers) const {
  for (const Pair& pair : state_) buffers.fill(pair.input, false);
  if (is_init_) buffers.fill(*is_init_, true);
}

void Carry::reset_rows(Buffers& buffers) const {
  for (const Pair& pair : state_) buffers.fill_rows(pair.input, false);
  if (is_init_) buffers.fill_rows(*is_init_, true);
}

void HostBuffers::copy(size_t input, size_t output) {
  std::memcpy(inputs_[input], outputs_[output], input_bytes_[input]);
}

void HostBuffers::fill(size_t input, bool one) {
  std::memset(inputs_[input], one ? 1 : 0, input_bytes_[input]);  // one: bool true
}

void HostBuffers::fill_rows(size_t input, bool one) {
  if (rows_ == nullptr) throw InternalError("carry buffers filled rows without a mask");
  const size_t width = input_bytes_[input] / static_cast<size_t>(batch_);
  char* data = static_cast<char*>(inputs_[input]);
  for (int64_t row = 0; row < batch_; ++row) {
    if ((*rows_)[static_cast<size_t>(row)]) {
      std::memset(data + static_cast<size_t>(row) * width, one ? 1 : 0, width);
    }
  }
}

}  // namespace tdaot::detail
