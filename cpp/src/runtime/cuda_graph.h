// Internal: the CUDA graph of a bound run (BindOptions::cuda_graph, tdaot/binding.h).
//
// Captured once at bind time, then replayed by every Binding::run on the caller's current
// stream: one graph launch instead of the model's kernel launches and AOTInductor's per-call
// host work. The graph runs the model through a runner of its own (AOTInductor's
// single-threaded run: no per-call CUDA event, which a capture would leave unusable for the
// policy's shared runner), on the binding's own input tensors, and copies its outputs into the
// binding's output tensors; the model's intermediates live in the graph's private memory pool.
#pragma once

#include <ATen/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "core/package/package.h"

namespace tdaot::detail {

class CudaGraphRun {
 public:
  // Loads a single-threaded runner of the model in `files`, runs it once on `inputs` (warm-up:
  // lazy kernel loading, allocator growth) and captures one run plus the copies into `outputs`
  // on a side stream. `what` names the model and binding in error messages. Throws
  // ExecutionError when the model fails or cannot be captured, and tdaot::Error on a runtime
  // built without CUDA.
  CudaGraphRun(const ExtractedModel& files, c10::Device device, const std::vector<at::Tensor>& inputs,
               const std::vector<at::Tensor>& outputs, const std::string& what);
  ~CudaGraphRun();
  CudaGraphRun(const CudaGraphRun&) = delete;
  CudaGraphRun& operator=(const CudaGraphRun&) = delete;

  // Launches the graph on the current CUDA stream of the binding's device. Allocates nothing.
  void replay();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tdaot::detail
