// Internal: the safety envelope over raw contiguous CPU buffers: the one implementation of its
// rules, for both runtimes (the lite binding calls it directly; the full runtime's Session and
// Binding through runtime/envelope.h, which only stages CUDA tensors through host memory).
// After each run, every floating input and output element must be finite,
// else the outputs are replaced by the previous run's and the run does not count (the caller
// does not carry its state); outputs with a contract max_delta move at most that far per element
// from the previous run's, except on a row's first run after creation or a reset. Allocates
// nothing after construction.
#pragma once

#include <cstdint>
#include <vector>

#include "tdaot/envelope.h"
#include "tdaot/manifest.h"

namespace tdaot::detail {

class BufferEnvelope {
 public:
  BufferEnvelope(const Manifest& manifest, int64_t batch);

  // Guards one run that read `inputs` and wrote `outputs` (manifest order, [batch, *shape]).
  // Returns false when it had a non-finite element: `outputs` then hold the previous run's.
  bool guard(const std::vector<const void*>& inputs, const std::vector<void*>& outputs);
  void reset();
  // The rows where mask[row] is true.
  void reset(const std::vector<bool>& mask);
  const Interventions& interventions() const noexcept { return counts_; }
  // Per row, whether the last guard rate limited an element of it (1) or not (0).
  const std::vector<uint8_t>& limited_rows() const noexcept { return limited_rows_; }

 private:
  struct Buffer {
    DType dtype;
    int64_t row = 0;                // elements per row
    std::vector<uint8_t> previous;  // what the last run gave, [batch, row]
    std::vector<double> rest;       // per element of a row: before the first run
    std::vector<double> max_delta;  // per element of a row; empty: not rate limited
  };
  void forget_row(int64_t row);
  bool limit(Buffer& output, void* data);

  int64_t batch_;
  std::vector<DType> input_dtypes_;
  std::vector<int64_t> input_numel_;
  std::vector<Buffer> outputs_;
  std::vector<uint8_t> fresh_;
  std::vector<uint8_t> limited_rows_;
  Interventions counts_;
};

// Element i of a floating buffer of `dtype` as a double, and back (rounded to nearest even);
// whether all n elements are finite (other dtypes always are). Shared with the supervisor.
double load_element(const void* data, DType dtype, int64_t i);
void store_element(void* data, DType dtype, int64_t i, double value);
bool elements_finite(const void* data, DType dtype, int64_t n);

}  // namespace tdaot::detail
