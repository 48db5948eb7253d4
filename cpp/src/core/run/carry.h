// Internal: the recurrent carry, the one implementation every runner applies (tdaot::Session,
// tdaot::Binding, tdaot::lite::Binding): which state output feeds which state input, the is_init
// input, and when each is written. Torch-free; each runner says how its buffers are written
// (Carry::Buffers): raw host memory here (HostBuffers), at::Tensor in the full runtime
// (runtime/carry_buffers.h).
//
// The rules: at creation and after a reset the state of the (reset) rows is zero and is_init
// marks them; after every step that counts (the envelope may refuse one) each state output is
// copied into its state input and is_init is cleared in every row: a mark, whether a reset or
// the caller set it, is for one step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "tdaot/manifest.h"

namespace tdaot::detail {

class Carry {
 public:
  // Indices into the manifest's inputs and outputs.
  struct Pair {
    size_t input;
    size_t output;
  };

  // How one runner writes its buffers, by manifest index.
  class Buffers {
   public:
    // The whole of output `output` into input `input` (same dtype and shape).
    virtual void copy(size_t input, size_t output) = 0;
    // Every element of input `input` zero, or true (`one` is only asked of the bool is_init).
    virtual void fill(size_t input, bool one) = 0;
    // The same on the rows of the reset at hand only (see reset_rows).
    virtual void fill_rows(size_t input, bool one) = 0;

   protected:
    ~Buffers() = default;
  };

  // Nothing is carried for a manifest without a "recurrent" section.
  explicit Carry(const Manifest& manifest);

  const std::vector<Pair>& state() const noexcept { return state_; }
  const std::optional<size_t>& is_init() const noexcept { return is_init_; }
  // Whether input `input` is a state or the is_init input (the runner owns those).
  bool carried(size_t input) const noexcept;

  // After a step that counts: the state outputs into the state inputs, is_init cleared.
  void after_step(Buffers& buffers) const;
  // Every row starts afresh: state zero, is_init marked (also at creation).
  void reset(Buffers& buffers) const;
  // The rows of the reset at hand (Buffers::fill_rows) start afresh.
  void reset_rows(Buffers& buffers) const;

 private:
  std::vector<Pair> state_;
  std::optional<size_t> is_init_;
};

// Carry::Buffers over contiguous host memory laid out [batch, ...]: the inputs' and outputs'
// data and the inputs' byte counts in manifest order, and the rows of a reset as one flag per
// row. Allocates nothing after construction.
class HostBuffers final : public Carry::Buffers {
 public:
  HostBuffers(std::vector<void*> inputs, std::vector<size_t> input_bytes,
              std::vector<void*> outputs, int64_t batch)
      : inputs_(std::move(inputs)),
        input_bytes_(std::move(input_bytes)),
        outputs_(std::move(outputs)),
        batch_(batch) {}

  void copy(size_t input, size_t output) override;
  void fill(size_t input, bool one) override;
  void fill_rows(size_t input, bool one) override;
  // The rows fill_rows writes: row r where rows[r] is true (one flag per row); kept by reference.
  void set_rows(const std::vector<bool>& rows) noexcept { rows_ = &rows; }

 private:
  std::vector<void*> inputs_;
  std::vector<size_t> input_bytes_;
  std::vector<void*> outputs_;
  int64_t batch_;
  const std::vector<bool>* rows_ = nullptr;
};

}  // namespace tdaot::detail
